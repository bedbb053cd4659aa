#include "kernels/gpu/common/device.hpp"

#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

int select_device(int local_rank) {
  const int n = device_count();
  if (n <= 0) throw std::runtime_error("no GPU is visible to this process; --backend gpu needs one per process");
  const int d = local_rank % n;
  set_device(d);
  return d;
}

std::string device_description() {
  return "GPU " + std::to_string(current_device()) + " of " + std::to_string(device_count()) + ": " + query_device_name();
}

}  // namespace qattn::gpu
