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

std::string unusable_reason() {
  int n = 0;
  try {
    n = device_count();
  } catch (const std::runtime_error& e) {
    return std::string("no usable GPU or GPU driver on this machine (") + e.what() + "); run on a machine with a GPU and a current driver, or use the emulate backend";
  }
  if (n <= 0) return "no GPU is visible to this process; run on a machine with a GPU, or use the emulate backend";
  return "";
}

std::string device_description() {
  return "GPU " + std::to_string(current_device()) + " of " + std::to_string(device_count()) + ": " + query_device_name();
}

}  // namespace qattn::gpu
