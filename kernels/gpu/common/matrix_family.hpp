#pragma once
// What the two matrix-unit families (mma/, wgmma/) share on the host: the operands they take, from
// the emulator's quantizers, and the coverage rule they both apply with their own row of values
// (the accumulations each runs, measured; the key tiles; the preparation kernels).
#include <string>

#include "kernels/gpu/common/matrix_inputs.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

// The two matrix-unit families take the same operands; they differ in the P V accumulation they
// run (what the instruction's accumulator does, measured) and in what else they implement.
struct MatrixFamily {
  const char* kernel;                        // for the messages
  bool (*e4m3_pv)(const Accumulator&, int);  // an e4m3 P V accumulation this family runs, by key tile
  bool (*fp16_pv)(const Accumulator&);       // and an fp16 one
  bool (*bf16_pv)(const Accumulator&);       // and a bf16 one (null: no bf16 operands at all)
  const char* e4m3_need;                     // what to write instead
  const char* fp16_need;
  const char* bf16_need;                     // with bf16_pv null: why bf16 operands are refused
  bool tile128;                              // 128-key tiles too (e4m3 P V, head dims up to 128)
  // Why the family's preparation kernels do not take a rotated or smoothed recipe (null: it has none).
  std::string (*prepared_not_covered)(const Recipe& r, int dim);
};

// The shared rule with family f's values ("" when f takes the recipe's values).
std::string matrix_not_covered(const Problem& p, const Recipe& r, const MatrixFamily& f);

// An mma(...) accumulator written out like a measured preset but for factor_emin: the hint that says so.
std::string factor_emin_hint(const Accumulator& a);

// Kernel inputs for a recipe either family covers, from the same quantizers the emulator uses.
MmaInputs make_mma_inputs(const Problem& p, const Recipe& r);

}  // namespace qattn::gpu
