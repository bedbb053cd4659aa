// Generic dot4 flash attention: S = Q K^T from int8 codes (dot4, int32), online softmax in exp2
// with the emulator's fp32 operations, P quantized against the running max through the lab's
// shared scalar codec, O += P V summed key by key in fp32 (the emulator's fp32 accumulator).
// One wave per query row; the tuning (waves per block) never changes a result.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/flash_dot4.hpp"
#include "kernels/gpu/platform.hpp"

namespace qattn::gpu {

namespace {

constexpr int kMaxChannelsPerLane = 8;  // d <= 8 * wave size

struct Params {
  const int* q;  // int8 codes packed four to an int32 word
  const int* k;
  const float *q_scales, *k_scales, *v;
  const int* rows;
  float* out;
  int nrows, hq, hkv, n, d, window, bc;
  bool causal, denominator_quantized;
  float c, p_mult;
  Format pf;
};

__device__ inline bool visible(const Params& p, int i, int j) {
  if (p.causal && j > i) return false;
  if (p.window > 0 && (i - j >= p.window || j - i >= p.window)) return false;
  return true;
}

__device__ inline int logit(const Params& p, int h, int kh, int i, int j) {
  const int words = p.d / 4;
  const int* a = p.q + (static_cast<long>(h) * p.n + i) * words;
  const int* b = p.k + (static_cast<long>(kh) * p.n + j) * words;
  int s = 0;
  for (int w = 0; w < words; ++w) s = dot4_i8(a[w], b[w], s);
  return s;
}

__global__ void flash_dot4_kernel(Params p) {
  extern __shared__ float shared_p[];
  const int lane = threadIdx.x % kWaveSize, wave = threadIdx.x / kWaveSize;
  const int r = blockIdx.x * (blockDim.x / kWaveSize) + wave;
  if (r >= p.nrows) return;
  const int h = blockIdx.y, kh = h / (p.hq / p.hkv), i = p.rows[r];
  float* pq = shared_p + wave * p.bc;

  int lo = 0, hi = p.n;
  if (p.causal) hi = i + 1;
  if (p.window > 0) {
    lo = max(0, i - p.window + 1);
    if (!p.causal) hi = min(p.n, i + p.window);
  }
  const float sq = p.q_scales[static_cast<long>(h) * p.n + i];
  const float neg_inf = -INFINITY;
  float m = neg_inf, l = 0.0f;
  float o[kMaxChannelsPerLane];
  for (int u = 0; u < kMaxChannelsPerLane; ++u) o[u] = 0.0f;

  for (int j0 = (lo / p.bc) * p.bc; j0 < hi; j0 += p.bc) {
    const int w = min(p.n, j0 + p.bc) - j0;
    // S = Q K^T for this lane's keys of the tile.
    float s_lane[8];
    float tile_max = neg_inf;
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize, j = j0 + jj;
      float s = neg_inf;
      if (jj < w && visible(p, i, j)) {
        const float sk = p.k_scales[static_cast<long>(kh) * p.n + j];
        s = static_cast<float>(logit(p, h, kh, i, j)) * (sq * sk) * p.c;
      }
      s_lane[u] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = wave_max(tile_max);
    const float m_new = fmaxf(m, tile_max);
    if (m_new == neg_inf) continue;
    const float alpha = m == neg_inf ? 0.0f : exp2f(m - m_new);
    // Online softmax: P against the running max, quantized with its static multiplier.
    float rs = 0.0f;
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize;
      const float pf = s_lane[u] == neg_inf ? 0.0f : exp2f(s_lane[u] - m_new);
      const float q = static_cast<float>(decode(p.pf, quantize(p.pf, pf, p.p_mult)));
      if (jj < p.bc) pq[jj] = jj < w ? q : 0.0f;
      if (jj < w) rs += p.denominator_quantized ? q : pf;
    }
    l = alpha * l + wave_sum(rs);
    wave_sync();
    // O += P V: this lane's channels, keys in order.
    for (int u = 0; u * kWaveSize < p.d; ++u) {
      const int c = lane + u * kWaveSize;
      float acc = o[u] * alpha;
      for (int jj = 0; jj < w; ++jj) acc += pq[jj] * p.v[(static_cast<long>(kh) * p.n + j0 + jj) * p.d + c];
      o[u] = acc;
    }
    wave_sync();
    m = m_new;
  }
  const float denom = p.denominator_quantized ? l : l * p.p_mult;
  for (int u = 0; u * kWaveSize < p.d; ++u) {
    const int c = lane + u * kWaveSize;
    p.out[(static_cast<long>(h) * p.nrows + r) * p.d + c] = o[u] / denom;
  }
}

__global__ void logits_kernel(Params p, const int* hs, const int* is, const int* js, int count, int* result) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= count) return;
  result[t] = logit(p, hs[t], hs[t] / (p.hq / p.hkv), is[t], js[t]);
}

std::vector<int> pack(const std::vector<std::int8_t>& codes) {
  std::vector<int> words(codes.size() / 4);
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint32_t x = 0;
    for (int k = 0; k < 4; ++k) x |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(codes[4 * w + k])) << (8 * k);
    words[w] = static_cast<int>(x);
  }
  return words;
}

struct DeviceInputs {
  Params p{};
  DeviceBuffers mem;
  explicit DeviceInputs(const Dot4Inputs& in) {
    const int ws = wave_size();  // the device's (kWaveSize is per compiled architecture)
    if (in.dim % 4 != 0 || in.dim % ws != 0 || in.dim > kMaxChannelsPerLane * ws) {
      throw std::invalid_argument("flash_dot4: head dim " + std::to_string(in.dim) + " must be a multiple of 4 and of the wave size, at most " +
                                  std::to_string(kMaxChannelsPerLane * ws));
    }
    if (in.block_k % ws != 0 || in.block_k > 8 * ws) {
      throw std::invalid_argument("flash_dot4: key tile " + std::to_string(in.block_k) + " must be a multiple of the wave size, at most " +
                                  std::to_string(8 * ws));
    }
    p.q = mem.upload(pack(in.q_codes));
    p.k = mem.upload(pack(in.k_codes));
    p.q_scales = mem.upload(in.q_scales);
    p.k_scales = mem.upload(in.k_scales);
    p.v = mem.upload(in.v);
    p.rows = mem.upload(in.rows);
    p.nrows = static_cast<int>(in.rows.size());
    p.hq = in.q_heads;
    p.hkv = in.kv_heads;
    p.n = in.tokens;
    p.d = in.dim;
    p.window = in.window;
    p.bc = in.block_k;
    p.causal = in.causal;
    p.denominator_quantized = in.denominator_quantized;
    p.c = in.score_factor;
    p.p_mult = in.p_multiplier;
    p.pf = format_of(in.p_format);
  }
};

}  // namespace

std::vector<float> flash_dot4(const Dot4Inputs& in, const Dot4Tuning& tuning) {
  DeviceInputs dev(in);
  const std::size_t count = static_cast<std::size_t>(in.q_heads) * in.rows.size() * in.dim;
  float* out = dev.mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  dev.p.out = out;
  const int waves = tuning.rows_per_block;
  const dim3 grid((dev.p.nrows + waves - 1) / waves, in.q_heads);
  flash_dot4_kernel<<<grid, waves * wave_size(), sizeof(float) * waves * in.block_k>>>(dev.p);
  check_launch("flash_dot4_kernel");
  return download(out, count);
}

std::vector<int> dot4_logits(const Dot4Inputs& in, const std::vector<int>& h, const std::vector<int>& i, const std::vector<int>& j) {
  DeviceInputs dev(in);
  const int* hs = dev.mem.upload(h);
  const int* is = dev.mem.upload(i);
  const int* js = dev.mem.upload(j);
  int* res = dev.mem.alloc<int>(h.size());
  logits_kernel<<<(static_cast<int>(h.size()) + 127) / 128, 128>>>(dev.p, hs, is, js, static_cast<int>(h.size()), res);
  check_launch("logits_kernel");
  return download(res, h.size());
}

std::string device_name() { return query_device_name(); }

}  // namespace qattn::gpu
