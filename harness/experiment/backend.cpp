#include "harness/experiment/backend.hpp"

#include <stdexcept>

#include "kernels/emulate/emulator.hpp"

#if defined(QATTN_WITH_GPU)
#include "kernels/gpu/common/device.hpp"
#include "kernels/gpu/dispatch.hpp"
#endif

namespace qattn::backend {

namespace {
constexpr const char* kNoGpu = "this qattn was built without GPU kernels; configure with -DQATTN_GPU=CUDA or HIP";
}

bool gpu_built() {
#if defined(QATTN_WITH_GPU)
  return true;
#else
  return false;
#endif
}

void require_gpu(const std::string& where, bool device) {
  if (!gpu_built()) throw std::invalid_argument(where + ": " + kNoGpu);
#if defined(QATTN_WITH_GPU)
  // Asked once, before any work: a machine without a driver otherwise fails at the first cudaMalloc.
  if (device) {
    if (const std::string why = gpu::unusable_reason(); !why.empty()) throw std::invalid_argument(where + ": " + why);
  }
#else
  (void)device;
#endif
}

Backend parse(const std::string& name, const std::string& where) {
  if (name == "emulate") return Backend::emulate;
  if (name != "gpu") throw std::invalid_argument(where + " '" + name + "': expected emulate or gpu");
  require_gpu(where + " 'gpu'");
  return Backend::gpu;
}

const char* name(Backend b) { return b == Backend::gpu ? "gpu" : "emulate"; }

std::string not_covered(Backend b, const Problem& p, const Recipe& r) {
  if (b == Backend::emulate) return variant_not_modelled(p, r);
#if defined(QATTN_WITH_GPU)
  return gpu::not_covered(p, r);
#else
  (void)p, (void)r;
  throw std::invalid_argument(kNoGpu);
#endif
}

Output run(Backend b, const Problem& p, const Recipe& r, const std::vector<int>& prob_rows) {
  Output o;
  if (b == Backend::emulate) {
    EmulatorOptions eo;
    eo.prob_rows = prob_rows;
    EmulatorResult e = emulate(p, r, eo);
    o.out = std::move(e.out);
    o.probs = std::move(e.probs);
    o.has_probs = true;
    o.kernel = "emulator";
    return o;
  }
#if defined(QATTN_WITH_GPU)
  if (const std::string reason = gpu::not_covered(p, r); !reason.empty()) throw std::invalid_argument("no GPU kernel covers the recipe: " + reason);
  gpu::GpuResult g = gpu::run(p, r);
  o.out = std::move(g.out);
  o.kernel = std::move(g.kernel);
  return o;
#else
  throw std::invalid_argument(kNoGpu);
#endif
}

std::string select_gpu(int local_rank) {
#if defined(QATTN_WITH_GPU)
  gpu::select_device(local_rank);
  return gpu::device_description();
#else
  (void)local_rank;
  throw std::invalid_argument(kNoGpu);
#endif
}

}  // namespace qattn::backend
