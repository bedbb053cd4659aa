#pragma once
// Where a recipe runs: the bit-faithful emulator on this CPU, or the GPU kernels. The one place that
// knows whether this build has GPU kernels; `qattn eval`, `qattn run` and the Python bindings all
// choose and run a backend through it.
#include <string>
#include <vector>

#include "kernels/formats/tensor.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::backend {

enum class Backend { emulate, gpu };

// True when the build holds GPU kernels (configured with -DQATTN_GPU=CUDA or HIP).
bool gpu_built();
// Throws "`where`: this qattn was built without GPU kernels; ..." in a build without them, and, with
// `device`, "`where`: no usable GPU or GPU driver on this machine (...)" where none can be used.
void require_gpu(const std::string& where, bool device = true);
// "emulate" or "gpu"; anything else, or "gpu" in a build without GPU kernels, is refused with an
// error that starts with `where` (the option or key that named it).
Backend parse(const std::string& name, const std::string& where);
const char* name(Backend b);

// Why the backend cannot run the recipe on this problem ("" when it can: always for the emulator).
// A recipe no GPU kernel covers is reported, never silently emulated.
std::string not_covered(Backend b, const Problem& p, const Recipe& r);

struct Output {
  TensorF out;          // [Hq, rows, d], fp32 as a kernel writes it
  TensorD probs;        // [Hq, prob_rows, N]: the weight each key received (the emulator only)
  bool has_probs = false;
  std::string kernel;   // "emulator", or the GPU family that ran
};
// Runs a covered recipe (std::invalid_argument naming the reason otherwise). prob_rows: the rows
// whose P the emulator hands back; the GPU kernels hand back none. Throws NumericFailure when the
// result is no number.
Output run(Backend b, const Problem& p, const Recipe& r, const std::vector<int>& prob_rows = {});

// A sharded run's process takes the node's GPU (local_rank mod count); returns the GPU's
// description for logs. Throws without GPU kernels or a GPU.
std::string select_gpu(int local_rank);

}  // namespace qattn::backend
