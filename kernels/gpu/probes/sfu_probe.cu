// NVIDIA only: sweeps of the approximate exp2 and reciprocal (sfu_probe.hpp). Compiled without
// fast-math: the reference values here use the correctly rounded double operations.
#include <cmath>
#include <stdexcept>

#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/probes/sfu_probe.hpp"

namespace qattn::gpu {

namespace {

constexpr std::uint32_t kTableSize = 1u << 23;

__device__ float sfu(SfuOp op, float x) {
  float y;
  switch (op) {
    case SfuOp::ex2_ftz: asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    case SfuOp::ex2: asm volatile("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    case SfuOp::rcp_ftz: asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    default: asm volatile("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
  }
  return y;
}

__device__ bool is_ex2(SfuOp op) { return op == SfuOp::ex2_ftz || op == SfuOp::ex2; }

__global__ void apply_kernel(SfuOp op, const std::uint32_t* x, std::uint32_t* y, long n) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    y[i] = __float_as_uint(sfu(op, __uint_as_float(x[i])));
}

__global__ void table_kernel(SfuOp op, std::uint32_t* t) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kTableSize; i += gridDim.x * blockDim.x) {
    // -2 + i 2^-23 and 1 + i 2^-23 are exact: i has at most 23 bits.
    const float x = is_ex2(op) ? -2.0f + static_cast<float>(i) * 0x1p-23f : __uint_as_float(0x3f800000u | i);
    t[i] = __float_as_uint(sfu(op, x));
  }
}

// Flush-to-zero expectation: results below the smallest normal are zero.
__device__ float normal_or_zero(double v) { return std::fabs(v) < 0x1p-126 ? 0.0f * static_cast<float>(v) : static_cast<float>(v); }

__device__ float predict(SfuOp op, const std::uint32_t* table, float x, int h) {
  if (is_ex2(op)) {
    const double scaled = static_cast<double>(x) * 0x1p23;  // exact
    const double fixed = h == 0 ? floor(scaled) : h == 1 ? rint(scaled) : trunc(scaled);
    const long long xf = static_cast<long long>(fixed);
    const long long n = xf >> 23;  // floor
    const float t = __uint_as_float(table[xf & (kTableSize - 1)]);  // 2^(f - 2)
    return normal_or_zero(ldexp(static_cast<double>(t), static_cast<int>(n) + 2));
  }
  const std::uint32_t b = __float_as_uint(x);
  const int e = static_cast<int>((b >> 23) & 0xff) - 127;
  const double r = ldexp(static_cast<double>(__uint_as_float(table[b & (kTableSize - 1)])), -e);
  return normal_or_zero((b >> 31) ? -r : r);
}

__device__ float correctly_rounded(SfuOp op, float x) {
  return is_ex2(op) ? static_cast<float>(exp2(static_cast<double>(x))) : static_cast<float>(1.0 / static_cast<double>(x));
}

struct Counts {
  unsigned long long dev[2][256][8];
  unsigned long long miss[3][2][256];
  unsigned long long nonftz[2][256];
};

// Each thread takes 256 consecutive patterns (one binade but at its edges) and adds its tallies once.
__global__ void sweep_kernel(SfuOp op, SfuOp nonftz_op, const std::uint32_t* table, Counts* c) {
  const unsigned long long first = (blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x) * 256ull;
  if (first >= (1ull << 32)) return;
  const int hyps = is_ex2(op) ? 3 : 1;
  int key = -1;  // sign * 256 + exponent of the tallies held
  unsigned long long dev[8] = {}, miss[3] = {}, nonftz = 0;
  auto flush = [&]() {
    if (key < 0) return;
    const int s = key >> 8, e = key & 0xff;
    for (int k = 0; k < 8; ++k)
      if (dev[k]) atomicAdd(&c->dev[s][e][k], dev[k]);
    for (int h = 0; h < 3; ++h)
      if (miss[h]) atomicAdd(&c->miss[h][s][e], miss[h]);
    if (nonftz) atomicAdd(&c->nonftz[s][e], nonftz);
    for (auto& d : dev) d = 0;
    for (auto& m : miss) m = 0;
    nonftz = 0;
  };
  for (unsigned j = 0; j < 256; ++j) {
    const std::uint32_t b = static_cast<std::uint32_t>(first + j);
    if (static_cast<int>(b >> 23) != key) {
      flush();
      key = static_cast<int>(b >> 23);
    }
    const float x = __uint_as_float(b);
    if (!isfinite(x)) continue;
    const float y = sfu(op, x);
    const float cr = correctly_rounded(op, x);
    const std::uint32_t yb = __float_as_uint(y), cb = __float_as_uint(cr);
    const long long d = static_cast<long long>(yb) - static_cast<long long>(cb);
    const bool comparable = (yb >> 31) == (cb >> 31) && isfinite(y) && isfinite(cr) && (y != 0.0f || cr == 0.0f);
    ++dev[comparable && d >= -3 && d <= 3 ? static_cast<int>(d) + 3 : 7];
    const bool in_table_domain = is_ex2(op) ? fabsf(x) < 256.0f : ((b >> 23) & 0xff) != 0 && ((b >> 23) & 0xff) != 0xff;
    if (in_table_domain)
      for (int h = 0; h < hyps; ++h)
        if (__float_as_uint(predict(op, table, x, h)) != yb) ++miss[h];
    if (__float_as_uint(sfu(nonftz_op, x)) != yb) ++nonftz;
  }
  flush();
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { check(cudaMalloc(&p, n * sizeof(T)), "sfu probe: cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

std::vector<std::uint32_t> sfu_apply(SfuOp op, const std::vector<std::uint32_t>& x) {
  std::vector<std::uint32_t> y(x.size());
  if (x.empty()) return y;
  DeviceBuffer<std::uint32_t> dx(x.size()), dy(x.size());
  check(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "sfu_apply: copy in");
  apply_kernel<<<1024, 256>>>(op, dx.p, dy.p, static_cast<long>(x.size()));
  check_launch("sfu_apply");
  check(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), "sfu_apply: copy out");
  return y;
}

SfuSweep sfu_sweep(SfuOp op) {
  if (op != SfuOp::ex2_ftz && op != SfuOp::rcp_ftz) throw std::invalid_argument("sfu_sweep: op must be ex2_ftz or rcp_ftz");
  const SfuOp nonftz = op == SfuOp::ex2_ftz ? SfuOp::ex2 : SfuOp::rcp;
  SfuSweep s;
  DeviceBuffer<std::uint32_t> table(kTableSize);
  table_kernel<<<4096, 256>>>(op, table.p);
  check_launch("sfu_sweep: table");
  s.table.resize(kTableSize);
  check(cudaMemcpy(s.table.data(), table.p, kTableSize * 4, cudaMemcpyDeviceToHost), "sfu_sweep: table out");
  DeviceBuffer<Counts> counts(1);
  check(cudaMemset(counts.p, 0, sizeof(Counts)), "sfu_sweep: clear");
  constexpr unsigned kThreads = (1ull << 32) / 256, kBlock = 256;
  sweep_kernel<<<kThreads / kBlock, kBlock>>>(op, nonftz, table.p, counts.p);
  check_launch("sfu_sweep: sweep");
  Counts host;
  check(cudaMemcpy(&host, counts.p, sizeof(Counts), cudaMemcpyDeviceToHost), "sfu_sweep: counts out");
  for (int sg = 0; sg < 2; ++sg)
    for (int e = 0; e < 256; ++e) {
      for (int k = 0; k < 8; ++k) s.dev[sg][e][k] = host.dev[sg][e][k];
      for (int h = 0; h < 3; ++h) s.miss[h][sg][e] = host.miss[h][sg][e];
      s.nonftz[sg][e] = host.nonftz[sg][e];
    }
  return s;
}

}  // namespace qattn::gpu
