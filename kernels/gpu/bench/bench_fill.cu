// NVIDIA only (e4m3 conversions): the benchmarks' random device data (bench_fill.hpp).
#include "kernels/gpu/bench/bench_fill.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

namespace {

__device__ inline std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_kernel(std::uint8_t* dst, long count, Fill kind, std::uint64_t seed, float lo, float hi) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < count; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const std::uint32_t r = hash32(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(i));
    const float u = (r >> 8) * (1.0f / 16777216.0f);
    std::uint8_t code = static_cast<std::uint8_t>(r);
    if ((code & 0x7F) == 0x7F) code &= 0xFE;  // 0x7F / 0xFF are e4m3's NaN
    switch (kind) {
      case Fill::int8: dst[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(static_cast<int>(r % 255) - 127)); break;
      case Fill::e4m3_as_fp16: reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(widen_e4m3x2(code)); break;
      case Fill::e4m3_code: dst[i] = code; break;
      case Fill::fp16: reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(pack_f16x2(u * 4.0f - 2.0f, 0.0f)); break;
      case Fill::bf16: reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(pack_bf16x2(u * 4.0f - 2.0f, 0.0f)); break;
      case Fill::scale: reinterpret_cast<float*>(dst)[i] = lo + (hi - lo) * u; break;
    }
  }
}

}  // namespace

void fill_random(void* dst, long count, Fill kind, std::uint64_t seed, float lo, float hi) {
  fill_kernel<<<1024, 256>>>(static_cast<std::uint8_t*>(dst), count, kind, seed, lo, hi);
  check_launch("fill_kernel");
}

}  // namespace qattn::gpu
