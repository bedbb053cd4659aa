#pragma once
// The one place where CUDA and HIP differ. Named wrappers only: no macro pretends one vendor is the
// other. The wave size is an explicit constant of the target.
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define QATTN_GPU_HIP 1
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define QATTN_GPU_CUDA 1
#endif

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace qattn::gpu {

#if defined(QATTN_GPU_CUDA)
inline constexpr int kWaveSize = 32;
using Stream = cudaStream_t;
using Error = cudaError_t;
using Event = cudaEvent_t;
#elif defined(QATTN_GPU_HIP)
// The wave size of the architecture being compiled: CDNA (gfx9) runs wave64; RDNA (gfx10+) is compiled
// wave32 (clang's default for HIP there). One HIP binary holds both, so its host pass has no single
// wave size: host code sizes launches with wave_size() (the device's), never with kWaveSize.
#if defined(__GFX9__)
inline constexpr int kWaveSize = 64;
#else
inline constexpr int kWaveSize = 32;
#endif
#if defined(__HIP_DEVICE_COMPILE__)
static_assert(kWaveSize == __AMDGCN_WAVEFRONT_SIZE, "kWaveSize differs from the wave size the compiler targets");
#endif
using Stream = hipStream_t;
using Error = hipError_t;
using Event = hipEvent_t;
#endif

// ---- host side: errors, memory, events ----

inline void check(Error e, const char* what) {
#if defined(QATTN_GPU_CUDA)
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
#else
  if (e != hipSuccess) throw std::runtime_error(std::string("HIP error in ") + what + ": " + hipGetErrorString(e));
#endif
}

// After a launch: the launch's own error, then the kernel's (synchronizing).
inline void check_launch(const char* what) {
#if defined(QATTN_GPU_CUDA)
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
#else
  check(hipGetLastError(), what);
  check(hipDeviceSynchronize(), what);
#endif
}

inline void* device_alloc_bytes(std::size_t bytes) {
  void* p = nullptr;
#if defined(QATTN_GPU_CUDA)
  check(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
#else
  check(hipMalloc(&p, std::max<std::size_t>(bytes, 1)), "hipMalloc");
#endif
  return p;
}

inline void device_free(const void* p) {
#if defined(QATTN_GPU_CUDA)
  cudaFree(const_cast<void*>(p));
#else
  (void)hipFree(const_cast<void*>(p));
#endif
}

inline void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
#if defined(QATTN_GPU_CUDA)
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
#else
  check(hipMemcpy(dst, src, bytes, hipMemcpyHostToDevice), "hipMemcpy H2D");
#endif
}

inline void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
#if defined(QATTN_GPU_CUDA)
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
#else
  check(hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost), "hipMemcpy D2H");
#endif
}

inline void copy_on_device(void* dst, const void* src, std::size_t bytes) {
#if defined(QATTN_GPU_CUDA)
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
#else
  check(hipMemcpy(dst, src, bytes, hipMemcpyDeviceToDevice), "hipMemcpy D2D");
#endif
}

inline void fill_bytes(void* dst, int byte, std::size_t bytes) {
#if defined(QATTN_GPU_CUDA)
  check(cudaMemset(dst, byte, bytes), "cudaMemset");
#else
  check(hipMemset(dst, byte, bytes), "hipMemset");
#endif
}

// Typed helpers over the byte wrappers.
template <typename T>
T* upload(const std::vector<T>& host) {
  T* dev = static_cast<T*>(device_alloc_bytes(sizeof(T) * host.size()));
  copy_to_device(dev, host.data(), sizeof(T) * host.size());
  return dev;
}

template <typename T>
std::vector<T> download(const T* dev, std::size_t count) {
  std::vector<T> host(count);
  copy_to_host(host.data(), dev, sizeof(T) * count);
  return host;
}

// Device buffers freed on scope exit.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (const void* p : owned_) device_free(p);
  }
  template <typename T>
  T* keep(T* p) {
    owned_.push_back(p);
    return p;
  }
  template <typename T>
  T* alloc(std::size_t count) {
    return keep(static_cast<T*>(device_alloc_bytes(sizeof(T) * count)));
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    return keep(gpu::upload(host));
  }

 private:
  std::vector<const void*> owned_;
};

// A kernel that needs more than 48 KB of dynamic shared memory must say so first.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, int bytes) {
#if defined(QATTN_GPU_CUDA)
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "cudaFuncSetAttribute");
#else
  check(hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize, bytes), "hipFuncSetAttribute");
#endif
}

// Device-event timing: milliseconds between two recorded events.
class Timer {
 public:
  Timer() {
#if defined(QATTN_GPU_CUDA)
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
#else
    check(hipEventCreate(&start_), "hipEventCreate");
    check(hipEventCreate(&stop_), "hipEventCreate");
#endif
  }
  ~Timer() {
#if defined(QATTN_GPU_CUDA)
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
#else
    (void)hipEventDestroy(start_);
    (void)hipEventDestroy(stop_);
#endif
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start() {
#if defined(QATTN_GPU_CUDA)
    check(cudaEventRecord(start_), "cudaEventRecord");
#else
    check(hipEventRecord(start_), "hipEventRecord");
#endif
  }
  float stop_ms() {
    float ms = 0;
#if defined(QATTN_GPU_CUDA)
    check(cudaEventRecord(stop_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
#else
    check(hipEventRecord(stop_), "hipEventRecord");
    check(hipEventSynchronize(stop_), "hipEventSynchronize");
    check(hipEventElapsedTime(&ms, start_, stop_), "hipEventElapsedTime");
#endif
    return ms;
  }

 private:
  Event start_{}, stop_{};
};

// Median milliseconds of `reps` launches (device events around each) after 3 warm-up launches;
// after_warmup() checks what those did (the launch errors, a kernel missing from the build).
template <typename Launch, typename Check>
double median_launch_ms(int reps, const Launch& launch, const Check& after_warmup, const char* what) {
  for (int w = 0; w < 3; ++w) launch();
  after_warmup();
  std::vector<float> ms;
  Timer timer;
  for (int r = 0; r < reps; ++r) {
    timer.start();
    launch();
    ms.push_back(timer.stop_ms());
  }
  check_launch(what);
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

inline int device_count() {
  int n = 0;
#if defined(QATTN_GPU_CUDA)
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
#else
  check(hipGetDeviceCount(&n), "hipGetDeviceCount");
#endif
  return n;
}

inline int current_device() {
  int d = 0;
#if defined(QATTN_GPU_CUDA)
  check(cudaGetDevice(&d), "cudaGetDevice");
#else
  check(hipGetDevice(&d), "hipGetDevice");
#endif
  return d;
}

inline void set_device(int d) {
#if defined(QATTN_GPU_CUDA)
  check(cudaSetDevice(d), "cudaSetDevice");
#else
  check(hipSetDevice(d), "hipSetDevice");
#endif
}

inline std::string query_device_name() {
#if defined(QATTN_GPU_CUDA)
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, current_device()), "cudaGetDeviceProperties");
#else
  hipDeviceProp_t prop{};
  check(hipGetDeviceProperties(&prop, current_device()), "hipGetDeviceProperties");
#endif
  return prop.name;
}

// Threads per wave of the device, for launch shapes and limits computed on the host.
inline int wave_size() {
#if defined(QATTN_GPU_CUDA)
  return kWaveSize;
#else
  int device = 0, n = 0;
  check(hipGetDevice(&device), "hipGetDevice");
  check(hipDeviceGetAttribute(&n, hipDeviceAttributeWarpSize, device), "hipDeviceGetAttribute");
  return n;
#endif
}

// Resident blocks of `kernel` per multiprocessor at this launch shape (occupancy, for reports).
template <typename Kernel>
int max_active_blocks(Kernel kernel, int threads, int shared_bytes) {
  int n = 0;
#if defined(QATTN_GPU_CUDA)
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, shared_bytes), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
#else
  check(hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, reinterpret_cast<const void*>(kernel), threads, shared_bytes),
        "hipOccupancyMaxActiveBlocksPerMultiprocessor");
#endif
  return n;
}

// The most dynamic shared memory one block may ask for on this device (after allow_shared_bytes).
inline int max_shared_bytes_per_block() {
  int n = 0;
#if defined(QATTN_GPU_CUDA)
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()), "cudaDeviceGetAttribute");
#else
  check(hipDeviceGetAttribute(&n, hipDeviceAttributeMaxSharedMemoryPerBlock, current_device()), "hipDeviceGetAttribute");
#endif
  return n;
}

inline int multiprocessor_count() {
  int n = 0;
#if defined(QATTN_GPU_CUDA)
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, current_device()), "cudaDeviceGetAttribute");
#else
  check(hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, current_device()), "hipDeviceGetAttribute");
#endif
  return n;
}

// ---- device side: dot4, wave reductions ----

// Sum of four signed 8-bit products, packed in 32-bit words, plus c.
__device__ inline int dot4_i8(int a, int b, int c) {
#if defined(QATTN_GPU_CUDA)
  return __dp4a(a, b, c);
#elif defined(QATTN_GPU_HIP) && (defined(__gfx1030__) || defined(__gfx90a__) || defined(__gfx940__))
  return __builtin_amdgcn_sdot4(a, b, c, false);  // v_dot4_i32_i8, wrapping like __dp4a
#elif defined(QATTN_GPU_HIP) && defined(__GFX11__)
  // v_dot4_i32_iu8 with both operands signed (gfx11 has no v_dot4_i32_i8; sdot4 crashes clang-15 there).
  return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#else
  int s = c;
  for (int k = 0; k < 4; ++k) s += static_cast<std::int8_t>(a >> (8 * k)) * static_cast<std::int8_t>(b >> (8 * k));
  return s;
#endif
}

// Lane (this lane ^ mask)'s v: int, long long or float.
template <typename T>
__device__ inline T shuffle_xor(T v, int mask) {
#if defined(QATTN_GPU_CUDA)
  return __shfl_xor_sync(0xffffffffu, v, mask);
#else
  return __shfl_xor(v, mask);
#endif
}

// Integer reductions across the wave (exact in any order).
__device__ inline int wave_max(int v) {
  for (int m = kWaveSize / 2; m > 0; m >>= 1) v = max(v, shuffle_xor(v, m));
  return v;
}

__device__ inline long long wave_sum(long long v) {
  for (int m = kWaveSize / 2; m > 0; m >>= 1) v += shuffle_xor(v, m);
  return v;
}

__device__ inline float wave_max(float v) {
  for (int m = kWaveSize / 2; m > 0; m >>= 1) {
#if defined(QATTN_GPU_CUDA)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
#else
    v = fmaxf(v, __shfl_xor(v, m));
#endif
  }
  return v;
}

__device__ inline float wave_sum(float v) {
  for (int m = kWaveSize / 2; m > 0; m >>= 1) {
#if defined(QATTN_GPU_CUDA)
    v += __shfl_xor_sync(0xffffffffu, v, m);
#else
    v += __shfl_xor(v, m);
#endif
  }
  return v;
}

// Reduction across the lanes of one quad (4 consecutive lanes), as matrix-fragment rows need.
__device__ inline float quad_max(float v) {
#if defined(QATTN_GPU_CUDA)
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
#else
  v = fmaxf(v, __shfl_xor(v, 1));
  v = fmaxf(v, __shfl_xor(v, 2));
#endif
  return v;
}

__device__ inline float quad_sum(float v) {
#if defined(QATTN_GPU_CUDA)
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
#else
  v += __shfl_xor(v, 1);
  v += __shfl_xor(v, 2);
#endif
  return v;
}

__device__ inline void wave_sync() {
#if defined(QATTN_GPU_CUDA)
  __syncwarp();
#else
  // A wave runs in lockstep; the fence keeps the compiler from moving shared-memory accesses across.
  __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "wavefront");
  __builtin_amdgcn_wave_barrier();
#endif
}

// ---- device side: the special-function unit (NVIDIA) ----
// PTX's approximate exp2 and reciprocal, what exp2f and 1 / x compile to under fast math; the
// emulator's exp2=sfu and norm=sfu (kernels/numerics/sfu_math.hpp) are the H100's stored tables of
// them. AMD's units differ and are not modelled: a family refuses those knobs on HIP.
#if defined(QATTN_GPU_CUDA)
inline constexpr bool kHasNvidiaSfu = true;
__device__ inline float sfu_ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ inline float sfu_rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#else
inline constexpr bool kHasNvidiaSfu = false;
__device__ inline float sfu_ex2_ftz(float) { __builtin_trap(); return 0.0f; }
__device__ inline float sfu_rcp_ftz(float) { __builtin_trap(); return 0.0f; }
#endif

// ---- device side: matrix instructions and packed converts (NVIDIA mma.sync, per warp) ----
// Fragment layouts are PTX's: for m16n8kK, lane = 4 * group + quad_lane; A rows group and group + 8,
// C rows group (c[0], c[1]) and group + 8 (c[2], c[3]) at columns 2 * quad_lane + {0, 1}.
#if defined(QATTN_GPU_CUDA)
inline constexpr bool kHasMmaSync = true;

// C += A B with int8 A (16x32, row) and B (32x8, col): int32, exact.
__device__ inline void mma_i8_m16n8k32(int c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// C += A B with e4m3 A (16x32) and B (32x8) into fp32 (the hardware's accumulation; see README).
__device__ inline void mma_e4m3_m16n8k32(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
#if __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// C += A B with fp16 A (16x16) and B (16x8) into fp32.
__device__ inline void mma_f16_m16n8k16(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// Two floats to two e4m3 bytes (lo in the low byte): round to nearest even, saturating to +-448.
__device__ inline std::uint16_t pack_e4m3x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
  std::uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  __trap();
  return 0;
#endif
}

// Two floats to two fp16 (lo in the low half): round to nearest even.
__device__ inline std::uint32_t pack_f16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two floats to two bf16 (lo in the low half): round to nearest even, subnormals kept (as the
// emulator's rounding of P to bf16).
__device__ inline std::uint32_t pack_bf16x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  __trap();
  return 0;
#endif
}

// Two bf16 (lo in the low half) to floats, exactly: a bf16 is the top half of an fp32.
__device__ inline float2 unpack_bf16x2(std::uint32_t h) { return make_float2(__uint_as_float(h << 16), __uint_as_float(h & 0xFFFF0000u)); }

// Two e4m3 bytes (lo in the low byte) to two fp16 (lo in the low half), exactly.
__device__ inline std::uint32_t widen_e4m3x2(std::uint16_t v) {
#if __CUDA_ARCH__ >= 890
  std::uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(v));
  return h;
#else
  __trap();
  return 0;
#endif
}

// Four e4m3 bytes to two fp16 pairs, exactly: bytes 0, 1 into lo, bytes 2, 3 into hi (each low byte
// in the low half). The halves of v go to the converts as they are (no shift to move the high one).
__device__ inline void widen_e4m3x4(std::uint32_t v, std::uint32_t& lo, std::uint32_t& hi) {
#if __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n" : "=r"(lo), "=r"(hi) : "r"(v));
#else
  (void)v;
  lo = hi = 0;
  __trap();
#endif
}

// Two fp16 (lo in the low half) to floats, exactly.
__device__ inline float2 unpack_f16x2(std::uint32_t h) {
  float lo, hi;
  asm("{.reg .f16 l, u;\n mov.b32 {l, u}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, u;\n}\n" : "=f"(lo), "=f"(hi) : "r"(h));
  return make_float2(lo, hi);
}

// Four 8x8 matrices of 16-bit elements (8 rows of 16 bytes each) from shared memory: lanes 8m..8m+7
// give the row addresses of matrix m; lane l receives word l % 4 of row l / 4 of each matrix in r[m]
// (the B-operand layout of mma.sync for 16 bytes of k).
__device__ inline void load_matrix_x4(std::uint32_t r[4], const void* row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// 16-byte global-to-shared copy that runs asynchronously (zero-filled when !valid), and its fences.
__device__ inline void async_copy_16(void* shared, const void* global, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(global), "r"(bytes));
}
// The same copy, always valid: no source-size operand to compute.
__device__ inline void async_copy_16(void* shared, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global));
}
__device__ inline void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ inline void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}
#else
inline constexpr bool kHasMmaSync = false;
#endif

#if !defined(QATTN_GPU_CUDA)
// Two fp16 (lo in the low half) to floats, exactly: the portable form of the converts above.
__device__ inline float2 unpack_f16x2(std::uint32_t h) {
  const _Float16 lo = __builtin_bit_cast(_Float16, static_cast<std::uint16_t>(h & 0xFFFFu));
  const _Float16 hi = __builtin_bit_cast(_Float16, static_cast<std::uint16_t>(h >> 16));
  return make_float2(static_cast<float>(lo), static_cast<float>(hi));
}

// The async 16-byte copy's portable form (no cp.async): a plain copy, complete at once; the barrier
// that follows async_wait publishes it, as on NVIDIA.
__device__ inline void async_copy_16(void* shared, const void* global, bool valid) {
  *static_cast<uint4*>(shared) = valid ? *static_cast<const uint4*>(global) : make_uint4(0, 0, 0, 0);
}
__device__ inline void async_copy_16(void* shared, const void* global) { *static_cast<uint4*>(shared) = *static_cast<const uint4*>(global); }
__device__ inline void async_commit() {}
template <int Pending>
__device__ inline void async_wait() {}
#endif

}  // namespace qattn::gpu
