#pragma once
// The runner's gpu backend: which kernel covers a recipe, and running it. A recipe no kernel covers
// is reported as not covered (with why), never silently run on the CPU.
#include <string>

#include "kernels/formats/tensor.hpp"
#include "kernels/gpu/common/matrix_family.hpp"
#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"
#include "kernels/gpu/integer/flash_integer.hpp"
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/wgmma/flash_wgmma.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

// Each family's own rule (why it does not take the values of the knobs it declares: "" when it
// does), its inputs and its kernel's name are declared in its header, beside its code (its
// *_family.cpp); the knob table's refusals come first: family_not_covered asks both.

// Why `family` does not take the recipe on this problem ("" when it does): a knob it does not declare
// in the knob table (kernels/recipe/knobs.cpp: refusal by default), else its own rule above.
std::string family_not_covered(GpuFamily family, const Problem& p, const Recipe& r);
// Empty when some GPU kernel covers the recipe on this problem; otherwise a knob no family
// implements, or every family's reason.
std::string not_covered(const Problem& p, const Recipe& r);

struct GpuResult {
  TensorF out;         // [Hq, rows, d]
  std::string kernel;  // the family that ran
};
// Runs a covered recipe on the first family that covers it (dispatch.cpp's table of families, the order
// not_covered() asks them in): mma, wgmma, decode, integer, then dot4. std::invalid_argument when none does.
GpuResult run(const Problem& p, const Recipe& r);
// Runs it on this family (std::invalid_argument when the family does not take it or is not built here).
GpuResult run_family(GpuFamily family, const Problem& p, const Recipe& r);

}  // namespace qattn::gpu
