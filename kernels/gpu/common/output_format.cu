#include "kernels/gpu/common/output_format.hpp"

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

namespace {

__global__ void round_output_kernel(float* out, std::size_t count, Format format) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = round_float_to(format, out[i]);
}

}  // namespace

void round_output(float* out, std::size_t count, FormatId format) {
  if (format == FormatId::fp32 || count == 0) return;
  constexpr unsigned kThreads = 256;
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  round_output_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(out, count, format_of(format));
  check_launch("round_output_kernel");
}

}  // namespace qattn::gpu
