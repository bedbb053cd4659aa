#pragma once
// The runner's gpu backend: which kernel covers a recipe, and running it. A recipe no kernel covers
// is reported as not covered (with why), never silently run on the CPU.
#include <string>

#include "kernels/formats/tensor.hpp"
#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"
#include "kernels/gpu/integer/flash_integer.hpp"
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/wgmma/flash_wgmma.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kDot4KernelName = "flash_dot4";             // integer Q K^T by dot4
inline constexpr const char* kDot4FloatKernelName = "flash_dot4/float";  // the same family, Q K^T of values
inline constexpr const char* kMmaKernelName = "flash_mma";
inline constexpr const char* kWgmmaKernelName = "flash_wgmma";  // sm_90a
inline constexpr const char* kDecodeKernelName = "flash_decode";
inline constexpr const char* kIntegerKernelName = "flash_integer";

// Each family's own rule: why it does not take the values of the knobs it declares ("" when it does).
// The knob table's refusals (a knob the family does not declare) come first: family_not_covered asks both.
// Why the mma family does not take the recipe ("" when it does). Built only with CUDA.
std::string mma_not_covered(const Problem& p, const Recipe& r);
// Why the wgmma family does not take the recipe ("" when it does). Built only with CUDA; it runs
// only where the build holds sm_90a code and the GPU is a Hopper (else flash_wgmma throws).
std::string wgmma_not_covered(const Problem& p, const Recipe& r);
// How the wgmma family's P V meets O for a covered recipe (pv_acc's flush: per tile, or into O).
WgmmaPvAcc wgmma_pv_acc(const Recipe& r);
// Why the dot4 family does not take the recipe ("" when it does).
std::string dot4_not_covered(const Problem& p, const Recipe& r);
// Why the integer-softmax family does not take the recipe ("" when it does).
std::string integer_not_covered(const Problem& p, const Recipe& r);

// Why `family` does not take the recipe on this problem ("" when it does): a knob it does not declare
// in the knob table (kernels/recipe/knobs.cpp: refusal by default), else its own rule above.
std::string family_not_covered(GpuFamily family, const Problem& p, const Recipe& r);
// Empty when some GPU kernel covers the recipe on this problem; otherwise a knob no family
// implements, or every family's reason.
std::string not_covered(const Problem& p, const Recipe& r);

// Kernel inputs for a covered recipe, from the same quantizers the emulator uses.
Dot4Inputs make_inputs(const Problem& p, const Recipe& r);
MmaInputs make_mma_inputs(const Problem& p, const Recipe& r);
IntegerInputs make_integer_inputs(const Problem& p, const Recipe& r);

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
