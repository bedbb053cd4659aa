// NVIDIA only: one mma.sync per case (e4m3 m16n8k32 or fp16 m16n8k16, fp32 accumulators), for
// measuring the hardware's accumulation. The fragment layout is in mma_probe.hpp.
#include <stdexcept>
#include <string>

#include "kernels/gpu/probes/mma_probe.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

namespace {

constexpr int kWarpsPerBlock = 4;

// The two probed instructions: element type, k, where element j of a fragment register sits, and the mma.
struct ProbeE4m3 {  // m16n8k32, four e4m3 bytes a register
  using T = std::uint8_t;
  static constexpr int kK = kProbeK;
  static QATTN_HD constexpr int a_col(int lane, int reg, int j) { return mma_a_col(lane, reg, j); }
  static QATTN_HD constexpr int b_row(int lane, int reg, int j) { return mma_b_row(lane, reg, j); }
  static __device__ void mma(float (&acc)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) { mma_e4m3_m16n8k32(acc, a, b); }
};
struct ProbeF16 {  // m16n8k16, two fp16 a register
  using T = std::uint16_t;
  static constexpr int kK = kProbeK16;
  static QATTN_HD constexpr int a_col(int lane, int reg, int j) { return mma16_a_col(lane, reg, j); }
  static QATTN_HD constexpr int b_row(int lane, int reg, int j) { return mma16_b_row(lane, reg, j); }
  static __device__ void mma(float (&acc)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) { mma_f16_m16n8k16(acc, a, b); }
};

template <class I>
__global__ void mma_probe_kernel(const typename I::T* a, const typename I::T* b, const float* c, float* d, int cases) {
  using T = typename I::T;
  constexpr int kPerWord = 4 / sizeof(T), kBits = 8 * sizeof(T);
  const int lane = threadIdx.x % 32;
  const int kase = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (kase >= cases) return;  // whole warps only: every lane of a live warp reaches the mma
  const T* ac = a + static_cast<long>(kase) * kProbeM * I::kK;
  const T* bc = b + static_cast<long>(kase) * I::kK * kProbeN;
  const float* cc = c + static_cast<long>(kase) * kProbeM * kProbeN;
  float* dc = d + static_cast<long>(kase) * kProbeM * kProbeN;

  std::uint32_t ar[4], br[2];
  for (int r = 0; r < 4; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < kPerWord; ++j) w |= static_cast<std::uint32_t>(ac[mma_a_row(lane, r) * I::kK + I::a_col(lane, r, j)]) << (kBits * j);
    ar[r] = w;
  }
  for (int r = 0; r < 2; ++r) {
    std::uint32_t w = 0;
    for (int j = 0; j < kPerWord; ++j) w |= static_cast<std::uint32_t>(bc[I::b_row(lane, r, j) * kProbeN + mma_b_col(lane)]) << (kBits * j);
    br[r] = w;
  }
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = cc[mma_c_row(lane, i) * kProbeN + mma_c_col(lane, i)];
  I::mma(acc, ar, br);
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
  return run_probe("mma_f16_probe", a, b, c, ProbeF16::kK, mma_probe_kernel<ProbeF16>);
}

std::vector<float> mma_e4m3_probe(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                  const std::vector<float>& c) {
  return run_probe("mma_e4m3_probe", a, b, c, ProbeE4m3::kK, mma_probe_kernel<ProbeE4m3>);
}

std::string mma_probe_device() {
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  return query_device_name() + " (sm_" + std::to_string(major) + std::to_string(minor) + ")";
}

}  // namespace qattn::gpu
