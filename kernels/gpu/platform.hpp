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

#include <cstdint>

namespace qattn::gpu {

#if defined(QATTN_GPU_CUDA)
inline constexpr int kWaveSize = 32;
using Stream = cudaStream_t;
#elif defined(QATTN_GPU_HIP)
#if defined(__GFX9__)
inline constexpr int kWaveSize = 64;  // CDNA (gfx9): wave64
#else
inline constexpr int kWaveSize = 32;  // RDNA (gfx10+), compiled for wave32
#endif
#endif

// Sum of four signed 8-bit products, packed in 32-bit words, plus c.
__device__ inline int dot4_i8(int a, int b, int c) {
#if defined(QATTN_GPU_CUDA)
  return __dp4a(a, b, c);
#elif defined(QATTN_GPU_HIP) && (defined(__gfx1030__) || defined(__gfx90a__))
  return __builtin_amdgcn_sdot4(a, b, c, false);
#else
  int s = c;
  for (int k = 0; k < 4; ++k) s += static_cast<std::int8_t>(a >> (8 * k)) * static_cast<std::int8_t>(b >> (8 * k));
  return s;
#endif
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

__device__ inline void wave_sync() {
#if defined(QATTN_GPU_CUDA)
  __syncwarp();
#endif
}

}  // namespace qattn::gpu
