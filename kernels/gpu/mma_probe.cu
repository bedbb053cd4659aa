// NVIDIA only: one mma.sync per case (e4m3 m16n8k32 or fp16 m16n8k16, fp32 accumulators), for
// measuring the hardware's accumulation. The fragment layout is in mma_probe.hpp.
#include <stdexcept>
#include <string>

#include "kernels/gpu/mma_probe.hpp"
#include "kernels/gpu/platform.hpp"

namespace qattn::gpu {

namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void mma_probe_kernel(const std::uint8_t* a, const std::uint8_t* b, const float* c, float* d, int cases) {
  const int lane = threadIdx.x % 32;
  const int kase = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (kase >= cases) return;  // whole warps only: every lane of a live warp reaches the mma
  const std::uint8_t* ac = a + static_cast<long>(kase) * kProbeM * kProbeK;
  const std::uint8_t* bc = b + static_cast<long>(kase) * kProbeK * kProbeN;
  const float* cc = c + static_cast<long>(kase) * kProbeM * kProbeN;
  float* dc = d + static_cast<long>(kase) * kProbeM * kProbeN;

  std::uint32_t ar[4], br[2];
  for (int r = 0; r < 4; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < 4; ++j) w |= static_cast<std::uint32_t>(ac[mma_a_row(lane, r) * kProbeK + mma_a_col(lane, r, j)]) << (8 * j);
    ar[r] = w;
  }
  for (int r = 0; r < 2; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < 4; ++j) w |= static_cast<std::uint32_t>(bc[mma_b_row(lane, r, j) * kProbeN + mma_b_col(lane)]) << (8 * j);
    br[r] = w;
  }
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = cc[mma_c_row(lane, i) * kProbeN + mma_c_col(lane, i)];
  mma_e4m3_m16n8k32(acc, ar, br);
  for (int i = 0; i < 4; ++i) dc[mma_c_row(lane, i) * kProbeN + mma_c_col(lane, i)] = acc[i];
}

__global__ void mma_f16_probe_kernel(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d, int cases) {
  const int lane = threadIdx.x % 32;
  const int kase = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (kase >= cases) return;  // whole warps only
  const std::uint16_t* ac = a + static_cast<long>(kase) * kProbeM * kProbeK16;
  const std::uint16_t* bc = b + static_cast<long>(kase) * kProbeK16 * kProbeN;
  const float* cc = c + static_cast<long>(kase) * kProbeM * kProbeN;
  float* dc = d + static_cast<long>(kase) * kProbeM * kProbeN;
  std::uint32_t ar[4], br[2];
  for (int r = 0; r < 4; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < 2; ++j) w |= static_cast<std::uint32_t>(ac[mma_a_row(lane, r) * kProbeK16 + mma16_a_col(lane, r, j)]) << (16 * j);
    ar[r] = w;
  }
  for (int r = 0; r < 2; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < 2; ++j) w |= static_cast<std::uint32_t>(bc[mma16_b_row(lane, r, j) * kProbeN + mma_b_col(lane)]) << (16 * j);
    br[r] = w;
  }
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = cc[mma_c_row(lane, i) * kProbeN + mma_c_col(lane, i)];
  mma_f16_m16n8k16(acc, ar, br);
  for (int i = 0; i < 4; ++i) dc[mma_c_row(lane, i) * kProbeN + mma_c_col(lane, i)] = acc[i];
}

// Uploads the case arrays, poisons D (NaN: an unwritten output cannot pass for a result), runs
// `kernel` one warp per case and returns D.
template <class T, class Kernel>
std::vector<float> run_probe(const char* who, const std::vector<T>& a, const std::vector<T>& b, const std::vector<float>& c, int k,
                             Kernel kernel) {
  const std::size_t cases = c.size() / (kProbeM * kProbeN);
  if (c.size() != cases * kProbeM * kProbeN || a.size() != cases * kProbeM * k || b.size() != cases * k * kProbeN)
    throw std::invalid_argument(std::string(who) + ": expected a [cases][16][" + std::to_string(k) + "], b [cases][" + std::to_string(k) +
                                "][8], c [cases][16][8]; got " + std::to_string(a.size()) + ", " + std::to_string(b.size()) + ", " +
                                std::to_string(c.size()) + " elements");
  if (cases == 0) return {};
  DeviceBuffers mem;
  const T* da = mem.upload(a);
  const T* db = mem.upload(b);
  const float* dc = mem.upload(c);
  float* dd = mem.alloc<float>(c.size());
  fill_bytes(dd, 0xFF, sizeof(float) * c.size());
  const int n = static_cast<int>(cases);
  kernel<<<(n + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock>>>(da, db, dc, dd, n);
  check_launch(who);
  return download(dd, c.size());
}

}  // namespace

std::vector<float> mma_f16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b, const std::vector<float>& c) {
  return run_probe("mma_f16_probe", a, b, c, kProbeK16, mma_f16_probe_kernel);
}

std::vector<float> mma_e4m3_probe(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                  const std::vector<float>& c) {
  return run_probe("mma_e4m3_probe", a, b, c, kProbeK, mma_probe_kernel);
}

std::string mma_probe_device() {
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  return query_device_name() + " (sm_" + std::to_string(major) + std::to_string(minor) + ")";
}

}  // namespace qattn::gpu
