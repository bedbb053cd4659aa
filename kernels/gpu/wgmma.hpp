#pragma once
// Hopper's warpgroup matrix instructions (wgmma, sm_90a only) as named wrappers: the shared-memory
// matrix descriptor, the fences around an asynchronous group, and the instruction shapes the lab
// uses. NVIDIA-only; include after platform.hpp. Outside an sm_90a device pass every wrapper traps,
// and kWgmmaCompiled says so, so a kernel can report "not built for sm_90a" instead of trapping.
#include <cstdint>

#include "kernels/formats/host_device.hpp"

namespace qattn::gpu {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
inline constexpr bool kWgmmaCompiled = true;
#define QATTN_WGMMA 1
#else
inline constexpr bool kWgmmaCompiled = false;
#endif

inline constexpr int kWarpgroupThreads = 128;  // four consecutive warps, the first at a warp index divisible by 4

// Byte offset of element (row, k) of a K-major operand tile in the no-swizzle canonical layout:
// "core matrices" of 8 rows x 16 bytes, each stored contiguously (row r of one at 16 r); core
// matrices adjacent in K are `lbo` bytes apart, those adjacent in rows (M or N) `sbo` bytes apart.
// elem_bytes: 1 (e4m3, s8) or 2 (fp16, bf16).
QATTN_HD constexpr int wgmma_kmajor_offset(int row, int k, int elem_bytes, int lbo, int sbo) {
  const int kb = k * elem_bytes;  // the element's byte within its row
  return (row % 8) * 16 + (row / 8) * sbo + kb % 16 + (kb / 16) * lbo;
}

// The 64-bit shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address,
// leading-dimension byte offset (between core matrices adjacent in K) and stride-dimension byte
// offset (between those adjacent in M or N), each in 16-byte units; base offset 0; swizzle 0 (none).
QATTN_HD constexpr std::uint64_t wgmma_descriptor(std::uint32_t smem_address, int lbo, int sbo) {
  return static_cast<std::uint64_t>((smem_address & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<std::uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}

#if defined(__CUDACC__)

__device__ inline std::uint32_t shared_address(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

// Ordinary stores to shared memory that a wgmma (the async proxy) reads next: each writing thread
// fences, then the block synchronizes.
__device__ inline void fence_shared_for_async_proxy() {
#if defined(QATTN_WGMMA)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// Before the first wgmma of a group whose accumulator or A registers other instructions wrote.
__device__ inline void wgmma_fence() {
#if defined(QATTN_WGMMA)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ inline void wgmma_commit_group() {
#if defined(QATTN_WGMMA)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until at most N committed groups are pending.
template <int N>
__device__ inline void wgmma_wait_group() {
#if defined(QATTN_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

// scale-d (the predicate p below) is true in every wrapper: D = A B + D.

// Keeps the compiler from moving accesses of an accumulator register across the asynchronous
// instruction that owns it.
__device__ inline void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ inline void wgmma_fence_operand(std::int32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ inline void wgmma_fence_operand(std::uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }  // A fragments

// D(64x8, fp32) = A(64x32 e4m3) B(32x8 e4m3) + D, A and B from shared memory. Each thread of the
// warpgroup holds d[i] at row 16 warp + lane/4 + 8 (i/2), column 2 (lane%4) + i%2.
__device__ inline void wgmma_m64n8k32_f32_e4m3_ss(float d[4], std::uint64_t a_desc, std::uint64_t b_desc) {
#if defined(QATTN_WGMMA)
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "l"(a_desc), "l"(b_desc));
#else
  (void)d, (void)a_desc, (void)b_desc;
  __trap();
#endif
}

// As above with A from registers: each warp holds its 16 rows as mma.sync.m16n8k32 does (the
// fragment maps of mma_probe.hpp, rows offset by 16 warp).
__device__ inline void wgmma_m64n8k32_f32_e4m3_rs(float d[4], const std::uint32_t a[4], std::uint64_t b_desc) {
#if defined(QATTN_WGMMA)
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
#else
  (void)d, (void)a, (void)b_desc;
  __trap();
#endif
}

// D(64x8, int32) = A(64x32 s8) B(32x8 s8) + D from shared memory (no saturation: the PTX default).
__device__ inline void wgmma_m64n8k32_s32_s8_ss(std::int32_t d[4], std::uint64_t a_desc, std::uint64_t b_desc) {
#if defined(QATTN_WGMMA)
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0,%1,%2,%3}, %4, %5, p;\n}\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "l"(a_desc), "l"(b_desc));
#else
  (void)d, (void)a_desc, (void)b_desc;
  __trap();
#endif
}

// D(64x8, fp32) = A(64x16 fp16) B(16x8 fp16) + D from shared memory, both K-major (no transpose).
__device__ inline void wgmma_m64n8k16_f32_f16_ss(float d[4], std::uint64_t a_desc, std::uint64_t b_desc) {
#if defined(QATTN_WGMMA)
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "l"(a_desc), "l"(b_desc));
#else
  (void)d, (void)a_desc, (void)b_desc;
  __trap();
#endif
}

// The flash family's shapes: wgmma_s8_ss<N>, wgmma_f16_ss<N>, wgmma_e4m3_rs<N>, wgmma_f16_rs<N>
// (D of 64 x N; the A and D fragments as above, per 8-column block j: d[4 j + i]).
#include "kernels/gpu/wgmma_shapes.inc"

#endif  // __CUDACC__

}  // namespace qattn::gpu
