#pragma once
// The runner's gpu backend: which recipes the GPU kernels cover, and running a covered one.
#include <string>

#include "kernels/formats/tensor.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/gpu/flash_dot4.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

// Empty when a GPU kernel covers the recipe on this problem; otherwise why not (reported as "not
// covered", never silently run on the CPU).
std::string not_covered(const Problem& p, const Recipe& r);

// The dot4 kernel's inputs for a covered recipe, from the same quantizers the emulator uses.
Dot4Inputs make_inputs(const Problem& p, const Recipe& r);

// The kernel that runs a covered recipe, and its output [Hq, rows, d].
inline constexpr const char* kDot4KernelName = "flash_dot4";
TensorF run(const Problem& p, const Recipe& r);

}  // namespace qattn::gpu
