// The mma family's coverage rule (its row of the matrix families' rule) and its launch.
#include "kernels/gpu/common/host_operands.hpp"
#include "kernels/gpu/common/matrix_family.hpp"
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/prepare/prepare.hpp"

namespace qattn::gpu {

#if defined(QATTN_WITH_CUDA)
namespace {

const MatrixFamily kMmaFamily{
    "the mma kernel", [](const Accumulator& a, int) { return same_accumulator(a, h200_e4m3_mma_accumulator()); },
    [](const Accumulator& a) { return same_accumulator(a, h200_hmma_accumulator()); }, nullptr,
    "PV in e4m3 accumulates as the H200's mma.sync does: pv_acc must be h200_e4m3_mma",
    "PV in fp16 accumulates as the H200's HMMA does: pv_acc must be h200_hmma",
    "the mma kernel takes no bf16 operands (the wgmma kernel pairs bf16 QK^T with bf16 or e4m3 PV, and bf16 PV with int8 or "
    "bf16 QK^T)",
    false,
    [](const Recipe& r, int dim) { return prepare_not_covered(r, dim); }};

}  // namespace

std::string mma_not_covered(const Problem& p, const Recipe& r) { return matrix_not_covered(p, r, kMmaFamily); }

const char* run_mma(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = needs_preparation(r) ? flash_mma_prepared(p, r) : flash_mma(make_mma_inputs(p, r));
  return kMmaKernelName;
}
#else
std::string mma_not_covered(const Problem&, const Recipe&) { return "the mma family is built only for CUDA"; }
#endif

}  // namespace qattn::gpu
