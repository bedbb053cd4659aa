// NVIDIA sm_90a only: one wgmma per case (one warpgroup per block), for measuring the warpgroup
// instructions' accumulation. Operands go through shared memory in the no-swizzle K-major layout
// (wgmma.hpp); the case occupies rows 0..15, the rest of the 64 rows are zero.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/gpu/probes/mma_probe.hpp"  // mma.sync's A fragment maps: a warp's 16 rows of a register A
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/wgmma.hpp"
#include "kernels/gpu/probes/wgmma_probe.hpp"

namespace qattn::gpu {

namespace {

enum class Op { e4m3_ss, e4m3_rs, s8_ss, f16_ss, bf16_ss };

constexpr int kRows = 64, kCols = 8, kCaseRows = 16, kRowBytes = 32;  // every shape here has 32 bytes of K
// Core matrices adjacent in K are 128 bytes apart (one core matrix), 8-row groups 256 (two of them).
constexpr int kLbo = 128, kSbo = 256;

template <Op op>
using AccT = std::conditional_t<op == Op::s8_ss, std::int32_t, float>;
template <Op op>
QATTN_HD constexpr int elem_bytes() { return op == Op::f16_ss || op == Op::bf16_ss ? 2 : 1; }

template <Op op>
__global__ void __launch_bounds__(kWarpgroupThreads) wgmma_probe_kernel(const std::uint8_t* a, const std::uint8_t* b,
                                                                        const AccT<op>* c, AccT<op>* d, int* built) {
  if constexpr (!kWgmmaCompiled) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *built = 0;
    return;
  } else {
    constexpr int eb = elem_bytes<op>(), kk = kRowBytes / eb;
    __shared__ alignas(128) std::uint8_t sa[kRows * kRowBytes];
    __shared__ alignas(128) std::uint8_t sb[kCols * kRowBytes];
    const long kase = blockIdx.x;
    const std::uint8_t* ac = a + kase * kCaseRows * kRowBytes;  // [16][kk] elements, row-major
    const std::uint8_t* bc = b + kase * kk * kCols * eb;          // [kk][8] elements
    for (int i = threadIdx.x; i < kRows * kRowBytes; i += kWarpgroupThreads) {
      const int row = i / kRowBytes, kb = i % kRowBytes, k = kb / eb;
      sa[wgmma_kmajor_offset(row, k, eb, kLbo, kSbo) + kb % eb] = row < kCaseRows ? ac[row * kRowBytes + kb] : 0;
    }
    for (int i = threadIdx.x; i < kCols * kRowBytes; i += kWarpgroupThreads) {
      const int n = i / kRowBytes, kb = i % kRowBytes, k = kb / eb;
      sb[wgmma_kmajor_offset(n, k, eb, kLbo, kSbo) + kb % eb] = bc[(k * kCols + n) * eb + kb % eb];  // B^T: N rows, K-major
    }
    fence_shared_for_async_proxy();
    __syncthreads();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const AccT<op>* cc = c + kase * kCaseRows * kCols;
    AccT<op> acc[4];
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * warp + mma_c_row(lane, i);
      acc[i] = row < kCaseRows ? cc[row * kCols + mma_c_col(lane, i)] : AccT<op>(0);
    }
    const std::uint64_t da = wgmma_descriptor(shared_address(sa), kLbo, kSbo);
    const std::uint64_t db = wgmma_descriptor(shared_address(sb), kLbo, kSbo);
    std::uint32_t ar[4] = {0, 0, 0, 0};
    if (op == Op::e4m3_rs && warp == 0)
      for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 4; ++j)
          ar[r] |= static_cast<std::uint32_t>(ac[mma_a_row(lane, r) * kRowBytes + mma_a_col(lane, r, j)]) << (8 * j);
    for (auto& x : acc) wgmma_fence_operand(x);
    wgmma_fence();
    if constexpr (op == Op::e4m3_ss) wgmma_e4m3_ss<kCols>(acc, da, db);
    else if constexpr (op == Op::e4m3_rs) wgmma_e4m3_rs<kCols>(acc, ar, db);
    else if constexpr (op == Op::s8_ss) wgmma_s8_ss<kCols>(acc, da, db);
    else if constexpr (op == Op::bf16_ss) wgmma_bf16_ss<kCols>(acc, da, db);
    else wgmma_f16_ss<kCols>(acc, da, db);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    for (auto& x : acc) wgmma_fence_operand(x);
    AccT<op>* dc = d + kase * kCaseRows * kCols;
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * warp + mma_c_row(lane, i);
      if (row < kCaseRows) dc[row * kCols + mma_c_col(lane, i)] = acc[i];
    }
  }
}

template <Op op, class Elem>
std::vector<AccT<op>> run(const char* name, const std::vector<Elem>& a, const std::vector<Elem>& b, const std::vector<AccT<op>>& c) {
  constexpr int kk = kRowBytes / elem_bytes<op>();
  static_assert(sizeof(Elem) == elem_bytes<op>());
  const std::size_t cases = c.size() / (kCaseRows * kCols);
  if (c.size() != cases * kCaseRows * kCols || a.size() != cases * kCaseRows * kk || b.size() != cases * kk * kCols)
    throw std::invalid_argument(std::string(name) + ": expected a [cases][16][" + std::to_string(kk) + "], b [cases][" +
                                std::to_string(kk) + "][8], c [cases][16][8]; got " + std::to_string(a.size()) + ", " +
                                std::to_string(b.size()) + ", " + std::to_string(c.size()) + " elements");
  if (cases == 0) return {};
  DeviceBuffers mem;
  const auto* da = reinterpret_cast<const std::uint8_t*>(mem.upload(a));
  const auto* db = reinterpret_cast<const std::uint8_t*>(mem.upload(b));
  const AccT<op>* dc = mem.upload(c);
  AccT<op>* dd = mem.alloc<AccT<op>>(c.size());
  fill_bytes(dd, 0xFF, sizeof(AccT<op>) * c.size());  // NaN (or -1): an unwritten output cannot pass for a result
  int* built = mem.upload(std::vector<int>{1});
  wgmma_probe_kernel<op><<<static_cast<unsigned>(cases), kWarpgroupThreads>>>(da, db, dc, dd, built);
  check_launch(name);
  if (download(built, 1)[0] != 1)
    throw std::runtime_error(std::string(name) + ": this build holds no sm_90a code (wgmma); configure with "
                             "CMAKE_CUDA_ARCHITECTURES including 90a");
  return download(dd, c.size());
}

}  // namespace

std::vector<float> wgmma_e4m3_probe(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                    const std::vector<float>& c, WgmmaA a_from) {
  if (a_from == WgmmaA::registers) return run<Op::e4m3_rs>("wgmma_e4m3_probe (A in registers)", a, b, c);
  return run<Op::e4m3_ss>("wgmma_e4m3_probe (A in shared memory)", a, b, c);
}

std::vector<std::int32_t> wgmma_s8_probe(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b,
                                         const std::vector<std::int32_t>& c) {
  return run<Op::s8_ss>("wgmma_s8_probe", a, b, c);
}

std::vector<float> wgmma_f16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                   const std::vector<float>& c) {
  return run<Op::f16_ss>("wgmma_f16_probe", a, b, c);
}

std::vector<float> wgmma_bf16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                    const std::vector<float>& c) {
  return run<Op::bf16_ss>("wgmma_bf16_probe", a, b, c);
}

}  // namespace qattn::gpu
