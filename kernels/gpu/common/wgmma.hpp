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

// Named barrier `id` (1..15; 0 is __syncthreads') completes when `threads` threads (whole warps) have
// reached it: sync waits for that, arrive counts its warps and goes on. Warpgroups hand turns to
// each other with them (FlashAttention-3's ping-pong).
__device__ inline void named_barrier_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
__device__ inline void named_barrier_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }

// Keeps the compiler from moving accesses of an accumulator register across the asynchronous
// instruction that owns it.
__device__ inline void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ inline void wgmma_fence_operand(std::int32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ inline void wgmma_fence_operand(std::uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }  // A fragments

// The instruction shapes: wgmma_s8_ss<N>, wgmma_f16_ss<N>, wgmma_e4m3_ss<N>, wgmma_e4m3_rs<N>,
// wgmma_f16_rs<N>, wgmma_bf16_ss<N>, wgmma_bf16_rs<N>: D (64 x N) += A B with A from shared memory (_ss) or registers (_rs), B K-major
// in shared memory; scale-d true. D fragment: each thread holds, per 8-column block j, d[4 j + i]
// at row 16 warp + lane/4 + 8 (i/2), column 8 j + 2 (lane%4) + i%2. A in registers: each warp
// holds its 16 rows as mma.sync does (8-bit k32: mma_probe.hpp's maps; 16-bit k16: word r is row
// lane/4 + 8 (r%2), k 2 (lane%4) + 8 (r/2) and the next). s8: no saturation (wraps).
#include "kernels/gpu/common/wgmma_shapes.inc"

#endif  // __CUDACC__

}  // namespace qattn::gpu
