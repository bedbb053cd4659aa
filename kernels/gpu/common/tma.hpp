#pragma once
// Hopper's asynchronous copies and the barriers they complete on, as named wrappers: the tensor
// memory accelerator (TMA, `cp.async.bulk.tensor`, sm_90), the plain bulk copy, shared-memory
// mbarriers with transaction counts, and the per-warpgroup register re-allocation of sm_90a
// (`setmaxnreg`). NVIDIA-only; include after platform.hpp and wgmma.hpp.
//
// A tile map here always describes bytes (element type uint8, so int8, e4m3, fp16 and bf16 rows are
// all just rows of bytes) of a [planes][rows][row_bytes] array, and copies boxes of 16 bytes x
// box_rows: one box lands in shared memory as box_rows consecutive 16-byte lines, i.e. one column of
// core matrices of wgmma's no-swizzle K-major layout (wgmma.hpp). Rows past `rows` read as zero.
#include <cstdint>

#include <cudaTypedefs.h>  // CUtensorMap and the driver's entry-point types (no libcuda link: the entry point is looked up)

#include "kernels/gpu/common/wgmma.hpp"

namespace qattn::gpu {

inline constexpr int kTmaBoxBytes = 16;  // one core-matrix line: the widest box whose lines are wgmma's layout with no swizzle

// Encodes the map of a [planes][rows][row_bytes] byte array at `base` (16-byte aligned, row_bytes a
// multiple of 16), copying boxes of 16 bytes x box_rows (box_rows <= 256). Throws std::runtime_error
// naming `what` when the driver refuses it.
CUtensorMap make_tile_map(const void* base, int row_bytes, int rows, int planes, int box_rows, const char* what);

#if defined(__CUDACC__)

// ---- mbarriers (shared::cta) ----

__device__ inline void mbarrier_init(std::uint64_t* bar, int arrivals) {
#if defined(QATTN_WGMMA)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
#else
  (void)bar, (void)arrivals;
  __trap();
#endif
}

// Makes barrier initializations visible to the async proxy (the copy engine) before any copy uses them.
__device__ inline void mbarrier_init_fence() {
#if defined(QATTN_WGMMA)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// One arrival that also announces `bytes` of copies that will complete on this phase.
__device__ inline void mbarrier_arrive_expect_bytes(std::uint64_t* bar, std::uint32_t bytes) {
#if defined(QATTN_WGMMA)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}

__device__ inline void mbarrier_arrive(std::uint64_t* bar) {
#if defined(QATTN_WGMMA)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting
// on parity 1 returns at once: that is how a producer's first pass over empty stages goes through.
__device__ inline void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
#if defined(QATTN_WGMMA)
  const std::uint32_t address = shared_address(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

// ---- copies that complete on an mbarrier ----

// Box (x bytes, row, plane) of `map` into `dst` (128-byte aligned shared memory).
__device__ inline void tma_load_box(void* dst, const CUtensorMap* map, int x, int row, int plane, std::uint64_t* bar) {
#if defined(QATTN_WGMMA)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          shared_address(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(row), "r"(plane), "r"(shared_address(bar))
      : "memory");
#else
  (void)dst, (void)map, (void)x, (void)row, (void)plane, (void)bar;
  __trap();
#endif
}

// `bytes` (a multiple of 16) from global `src` to shared `dst`, both 16-byte aligned.
__device__ inline void bulk_load(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
#if defined(QATTN_WGMMA)
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
  __trap();
#endif
}

// ---- registers per warpgroup (the kernel needs a register cap at entry: __launch_bounds__(threads, 1)) ----

template <int N>
__device__ inline void warpgroup_registers_down() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
#if defined(QATTN_WGMMA)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

template <int N>
__device__ inline void warpgroup_registers_up() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
#if defined(QATTN_WGMMA)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

#endif  // __CUDACC__

}  // namespace qattn::gpu
