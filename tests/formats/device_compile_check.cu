// Compile-only proof that the scalar format code is valid device code: the same encode/decode/
// quantize the emulator uses, called from a __global__ function for every preset. Built by nvcc
// whenever it is found (see cmake/DeviceCheck.cmake); nothing runs it.
#include <cstdint>

#include "kernels/formats/codec.hpp"

namespace qattn::device_check {

template <qattn::FormatId Id>
__global__ void round_trip_kernel(const float* x, float inv_scale, float scale, std::uint32_t* codes, float* y, int n) {
  constexpr qattn::Format f = qattn::format_of(Id);
  static_assert(qattn::max_finite(f) > 0, "every preset has a positive max finite");
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  codes[i] = qattn::quantize(f, x[i], inv_scale);
  y[i] = qattn::dequantize(f, codes[i], scale) + static_cast<float>(qattn::round_to(f, x[i]));
}

// Constant evaluation inside the CUDA front end, not only the host compiler.
static_assert(qattn::encode(qattn::format_of(qattn::FormatId::e4m3), 448.0) == 0x7Eu);
static_assert(qattn::decode(qattn::format_of(qattn::FormatId::e4m3fnuz), 0x7Fu) == 240.0);
static_assert(qattn::flush_threshold(qattn::format_of(qattn::FormatId::e4m3)) == 1.0 / 1024.0);  // 2^-10

template __global__ void round_trip_kernel<qattn::FormatId::fp32>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::bf16>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::fp16>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e4m3>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e5m2>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e4m3fnuz>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e5m2fnuz>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e2m1>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::e8m0>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::int8>(const float*, float, float, std::uint32_t*, float*, int);
template __global__ void round_trip_kernel<qattn::FormatId::int4>(const float*, float, float, std::uint32_t*, float*, int);

}  // namespace qattn::device_check
