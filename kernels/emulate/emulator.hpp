#pragma once
// The quantized flash-attention emulator: attention computed the way a tiled quantized kernel
// computes it (same key tiles, same online softmax in exp2, same rounding at every step), so that
// its distance from the float64 reference is the recipe's true cost and GPU kernels can be checked
// against it. Rows are independent and run in parallel; results do not depend on the thread count.
#include <string>
#include <vector>

#include "kernels/recipe/recipe.hpp"
#include "kernels/problem/problem.hpp"

namespace qattn {

struct EmulatorOptions {
  std::vector<int> prob_rows;  // query rows whose effective probability rows are handed back
  int threads = 0;             // 0 = OpenMP's default; tuning only, never changes results
};

struct EmulatorResult {
  std::vector<int> rows;       // evaluated query rows (the problem's selection), sorted
  TensorF out;                 // [Hq, rows.size(), d], fp32 as the kernel writes it
  std::vector<int> prob_rows;
  // [Hq, prob_rows.size(), N]: the weight each key actually received in the output (the quantized
  // P rescaled by the online softmax's factors and divided by l); flushed keys hold exactly 0.
  TensorD probs;
};

// Why the recipe cannot apply the problem's attention variants (soft-capping under an integer
// softmax or a Q that carries the scale; sink logits under an integer softmax), or "".
std::string variant_not_modelled(const Problem& p, const Recipe& r);

// Throws std::invalid_argument for an invalid recipe (naming the field) or problem, or a variant the
// recipe does not model (variant_not_modelled).
EmulatorResult emulate(const Problem& p, const Recipe& r, const EmulatorOptions& opt = {});

// Integer QK^T logits of an integer recipe before any scale: sum over the head dim of the Q and K
// codes (after smoothing and rotation), per group when the recipe uses group scales. A test hook
// for bit-exact comparisons. Returns [groups] int32 values for query i of head h against key j.
std::vector<int> integer_logits(const Problem& p, const Recipe& r, int h, int i, int j);
// The same for queries [0, rows) of head h against keys [0, keys), prepared once: [rows][keys].
// The recipe must use one scale group over the head dim (tensor, head or token scales).
std::vector<int> integer_logit_block(const Problem& p, const Recipe& r, int h, int rows, int keys);

// Raw scores (before the softmax scale) of a float recipe's query i of head h against keys
// j0 .. j0 + count - 1, formed as the emulator forms a fully visible key tile (several keys at once
// when Q K^T sums in fp32). A test hook for bit-exact comparisons.
std::vector<float> float_scores(const Problem& p, const Recipe& r, int h, int i, int j0, int count);

}  // namespace qattn
