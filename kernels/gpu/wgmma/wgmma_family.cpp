// The wgmma family's coverage rule (its row of the matrix families' rule) and its launch.
#include "kernels/gpu/common/matrix_family.hpp"
#include "kernels/gpu/wgmma/flash_wgmma.hpp"

namespace qattn::gpu {

WgmmaPvAcc wgmma_pv_acc(const Recipe& r) { return r.pv_acc.flush_every > 0 ? WgmmaPvAcc::per_tile : WgmmaPvAcc::into_o; }

#if defined(QATTN_WITH_CUDA)
namespace {

const MatrixFamily kWgmmaFamily{
    "the wgmma kernel",
    // Per tile: the tile's instructions (two per 64 keys) from zero, one fp32 add into O.
    [](const Accumulator& a, int block_k) {
      return same_accumulator(a, h200_e4m3_wgmma_accumulator()) ||
             same_accumulator(a, block_k == 128 ? h200_e4m3_wgmma_tile128_accumulator() : h200_e4m3_wgmma_tile_accumulator());
    },
    [](const Accumulator& a) { return same_accumulator(a, h200_hmma_tile_accumulator()); },
    [](const Accumulator& a) {
      return same_accumulator(a, h200_wgmma_bf16_accumulator()) || same_accumulator(a, h200_wgmma_bf16_tile_accumulator());
    },
    "PV in e4m3 accumulates as the H200's wgmma does: pv_acc must be h200_e4m3_wgmma (into O), or per key tile "
    "h200_e4m3_wgmma_tile (tiles.block_k 64) or h200_e4m3_wgmma_tile128 (tiles.block_k 128)",
    "PV in fp16 per 64-key tile: pv_acc must be h200_hmma_tile (h200_hmma, straight into O, runs in flash_mma)",
    "PV in bf16 accumulates as the H200's bf16 wgmma does: pv_acc must be h200_wgmma_bf16 (into O) or h200_wgmma_bf16_tile "
    "(per 64-key tile)",
    true,
    nullptr};

}  // namespace

std::string wgmma_not_covered(const Problem& p, const Recipe& r) { return matrix_not_covered(p, r, kWgmmaFamily); }

const char* run_wgmma(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_wgmma(make_mma_inputs(p, r), wgmma_pv_acc(r));
  return kWgmmaKernelName;
}
#else
std::string wgmma_not_covered(const Problem&, const Recipe&) { return "the wgmma family is built only for CUDA (sm_90a)"; }
#endif

}  // namespace qattn::gpu
