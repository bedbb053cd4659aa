#pragma once
// Host interface of the warpgroup flash-attention family (NVIDIA sm_90a, wgmma): blocks of 128 query
// rows (192 for d = 64), a producer warpgroup issuing TMA copies and two (three) consumer warpgroups
// of 64 rows each, key tiles of 64 or 128 (MmaInputs::key_tile; 128 for e4m3 P V at d = 64 and
// 128), both products on Hopper's warpgroup instructions:
//   S = Q K^T   s8 wgmma m64n64k32 (int32, exact), or fp16 / bf16 m64n64k16 (fp32); Q and K from shared memory
//   O += P V    e4m3 wgmma m64nDk32 (fp32), or fp16 / bf16 m64nDk16; P from registers, V^T from shared memory
// It takes the mma family's inputs (MmaInputs: the same recipes, the same layouts on the host side),
// and bf16 operands, which the mma family does not: bf16 pairs with bf16, int8 or e4m3 (not fp16).
// How P V's accumulators meet O is a numerics choice that the recipe's pv_acc states:
//   per_tile: each key tile's products start from zero (2 chained e4m3 instructions per 64 keys, or
//             4 fp16 or bf16) and are added into O with one fp32 add, as SageAttention 2 does per 128
//             keys (pv_acc.flush_every = 2 for e4m3, 4 with 128-key tiles; 4 for fp16 and bf16);
//   into_o:   the instructions accumulate straight into O, as FlashAttention-3 does (flush_every = 0).
#include <cstdint>
#include <vector>

#include "kernels/gpu/common/matrix_inputs.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kWgmmaKernelName = "flash_wgmma";  // sm_90a

enum class WgmmaPvAcc : std::uint8_t { per_tile, into_o };

// Runs the kernel; returns [Hq, rows, d]. Throws std::invalid_argument on unsupported shapes, and
// std::runtime_error on a CUDA error or when the build holds no sm_90a code.
std::vector<float> flash_wgmma(const MmaInputs& in, WgmmaPvAcc pv_acc);

// Test hook: the raw QK^T accumulators (int32, or fp32 bits) of query rows [0, 16) of head h against
// keys [0, 64), in key order (the kernel stores keys permuted in shared memory; this undoes it): [16][64].
std::vector<std::int32_t> wgmma_logits(const MmaInputs& in, int h);

// Median milliseconds of `reps` launches on random device-resident inputs (batch folded into heads);
// denominator_quantized: l sums P as rounded (the lab's default) or before rounding (FlashAttention-3);
// key_tile: 64 or 128.
double bench_flash_wgmma(QkType qk, PvType pv, WgmmaPvAcc pv_acc, bool denominator_quantized, int key_tile, int batch, int q_heads,
                         int kv_heads, int tokens, int dim, bool causal, int reps);

// The family as dispatch's table sees it (wgmma_family.cpp): its row of the matrix families' rule
// ("" when it takes the recipe's values; built only with CUDA; it runs only where the build holds
// sm_90a code and the GPU is a Hopper, else flash_wgmma throws), how its P V meets O for a covered
// recipe (pv_acc's flush: per tile, or into O), and in the CUDA build its launch.
std::string wgmma_not_covered(const Problem& p, const Recipe& r);
WgmmaPvAcc wgmma_pv_acc(const Recipe& r);
const char* run_wgmma(const Problem& p, const Recipe& r, std::vector<float>& out);

}  // namespace qattn::gpu
