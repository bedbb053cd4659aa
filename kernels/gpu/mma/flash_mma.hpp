#pragma once
// Host interface of the matrix-instruction flash-attention family (NVIDIA mma.sync): S = Q K^T in
// int8 (m16n8k32, int32, exact) or fp16 (m16n8k16, fp32), online softmax in exp2, P quantized
// against the running max (e4m3 with a static multiplier, or fp16), O += P V by fp16 HMMAs
// (m16n8k16) accumulating as the H200 does (a recipe's pv_acc names the model: h200_e4m3_mma for
// e4m3 P and V, h200_hmma for fp16).
//
// Device layouts the kernels read (the preparation kernels write them; the host path uploads them):
//   Q [Hq][N][d] and K [Hkv][N][d]: int8 codes (scales [H][N] fp32, one per token) or fp16 values.
//   Vt [Hkv][d][Np], Np = N rounded up to the key tile (64): V transposed, as fp16 values (e4m3 V:
//   its e4m3 values widened to fp16, exactly); padding keys are zero. v_scales [Hkv][d] fp32 (one
//   per channel) multiply O at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gpu/common/matrix_inputs.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kMmaKernelName = "flash_mma";

// Tuning: never changes a result (a test proves it).
struct MmaTuning {
  int warps = 4;  // 16 query rows per warp: 4 or 8 warps per block
};

// Runs the kernel; returns [Hq, rows, d]. Throws std::invalid_argument on unsupported shapes or bf16
// operands, and std::runtime_error on a CUDA error.
std::vector<float> flash_mma(const MmaInputs& in, const MmaTuning& tuning = {});

// From raw fp32 Q, K, V to the output on the device: the preparation kernels (prepare.cu: rotation,
// K smoothing, int8 Q/K and e4m3 V quantization) feed the int8 QK + e4m3 PV kernel. For recipes
// mma_not_covered (mma_family.cpp) accepts with rotation or K smoothing. Returns [Hq, rows, d].
std::vector<float> flash_mma_prepared(const Problem& p, const Recipe& r, const MmaTuning& tuning = {});

// Test hook: the raw QK^T accumulators (int32 for int8, fp32 bits for fp16) of query rows [0, 16)
// of head h against keys [0, 64), from the mma path: [16][64].
std::vector<std::int32_t> mma_logits(const MmaInputs& in, int h);

// Median milliseconds of `reps` launches on random device-resident inputs of the given shape
// (batch folded into heads), after warm-up; no host transfers are timed.
double bench_flash_mma(QkType qk, PvType pv, int batch, int q_heads, int kv_heads, int tokens, int dim, bool causal, int reps,
                       const MmaTuning& tuning = {});

// The family as dispatch's table sees it (mma_family.cpp): its row of the matrix families' rule
// ("" when it takes the recipe's values; built only with CUDA) and, in the CUDA build, its launch.
std::string mma_not_covered(const Problem& p, const Recipe& r);
const char* run_mma(const Problem& p, const Recipe& r, std::vector<float>& out);

}  // namespace qattn::gpu
