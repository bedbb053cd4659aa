#pragma once
// The emulator's preparation steps on the CPU, exposed so that the GPU preparation kernels
// (kernels/gpu/prepare/prepare.hpp) can be checked against them bit for bit. emulate() runs them in this
// order: hadamard_rows on Q and K (rotation), smooth_k on K, smooth_q, smooth_v, then the quantizers.
#include <vector>

#include "kernels/formats/tensor.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn {

// Orthonormal Hadamard transform of every row (d a power of two): a float64 fast Walsh-Hadamard
// transform per row (butterflies by increasing length), then fp32(x * (1 / sqrt(d))).
void hadamard_rows(TensorF& t);

// Subtracts K's channel mean as r.k_smoothing says (float64 sums over keys in order, mean rounded to
// fp32, fp32 subtraction). Returns the per-block means [Hkv][blocks][d] of block_mean and
// block_mean_corrected (block r.k_smoothing_block, or r.tiles.block_k when 0); empty otherwise.
std::vector<float> smooth_k(TensorF& k, const Recipe& r);

// Q smoothing (SageAttention2): each tile of block_q queries minus its channel mean (float64 sums in
// order, mean rounded to fp32, fp32 subtraction). Returns the means [Hq][tiles][d].
std::vector<float> smooth_q(TensorF& q, int block_q);

// V smoothing: V minus its channel mean over all tokens, as smooth_q with one block. Returns the
// means [Hkv][d].
std::vector<float> smooth_v(TensorF& v);

}  // namespace qattn
