// Integer-softmax flash attention (QFlash, I-ViT shiftmax): one wave per query row, S = Q K^T by
// dot4, the softmax in the emulator's integer functions (kernels/numerics/qflash.hpp), O += P V in
// integers. Integer sums are exact in any order, so lanes and waves may split them freely; the
// tuning (waves per block) never changes a result.
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/numerics/qflash.hpp"
#include "kernels/gpu/integer/flash_integer.hpp"
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/query_rows.hpp"

namespace qattn::gpu {

namespace {

using qflash::kLog2e;

struct Params {
  const int *q = nullptr, *k = nullptr;  // codes packed four to an int32 word [H][N][d/4]
  const std::int8_t* v = nullptr;        // [Hkv][N][d]
  const float *q_scales = nullptr, *k_scales = nullptr, *v_scales = nullptr;
  const int* rows = nullptr;
  float* out = nullptr;
  int nrows = 0, hq = 0, hkv = 0, n = 0, d = 0, bc = 0;
  RowMask mask;  // the keys each query row sees
  double scale = 0;
};

__device__ inline int logit(const Params& p, int h, int kh, int i, int j) {
  const int words = p.d / 4;
  const int* a = p.q + (static_cast<long>(h) * p.n + i) * words;
  const int* b = p.k + (static_cast<long>(kh) * p.n + j) * words;
  int s = 0;
  for (int w = 0; w < words; ++w) s = dot4_i8(a[w], b[w], s);
  return s;
}

__device__ inline int v_code(const Params& p, int kh, int j, int c) { return p.v[(static_cast<long>(kh) * p.n + j) * p.d + c]; }

// QFlash: key tiles, the running max an integer, P8 requantized per tile, l and O released by alpha.
__device__ void qflash_row(const Params& p, long long* p8, int h, int kh, int i, int lo, int hi, int lane, float out[]) {
  const qflash::Constants c = qflash::constants(static_cast<double>(p.q_scales[h]) * p.k_scales[kh] * p.scale * kLog2e);
  long long m = -(1LL << 21), l = 0;
  long long o[kMaxChannelsPerLane] = {};
  for (int j0 = (lo / p.bc) * p.bc; j0 < hi; j0 += p.bc) {
    const int w = min(p.n, j0 + p.bc) - j0;
    // S = Q K^T for this lane's keys; the tile's max over its visible keys.
    int s_lane[kMaxKeysPerLane];
    bool vis_lane[kMaxKeysPerLane];
    int tile_max = INT_MIN;
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize, j = j0 + jj;
      vis_lane[u] = jj < w && p.mask.visible(i, j);
      s_lane[u] = vis_lane[u] ? logit(p, h, kh, i, j) : 0;
      if (vis_lane[u]) tile_max = max(tile_max, s_lane[u]);
    }
    tile_max = wave_max(tile_max);
    if (tile_max == INT_MIN) continue;  // nothing visible in this tile
    const long long m_new = m > tile_max ? m : tile_max;
    const long long alpha = qflash::shift_exp2(m - m_new, c);
    long long row_sum = 0;
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize;
      const long long pq = vis_lane[u] ? qflash::requantize(qflash::shift_exp2(s_lane[u] - m_new, c), c) : 0;
      if (jj < p.bc) p8[jj] = pq;
      row_sum += pq;
    }
    l = qflash::scale_release(l, alpha, c) + wave_sum(row_sum);
    wave_sync();
    // O = release(O, alpha) + P8 V: this lane's channels.
    for (int u = 0; u * kWaveSize < p.d; ++u) {
      const int ch = lane + u * kWaveSize;
      long long acc = 0;
      for (int jj = 0; jj < w; ++jj) acc += p8[jj] * v_code(p, kh, j0 + jj, ch);
      o[u] = qflash::scale_release(o[u], alpha, c) + acc;
    }
    wave_sync();
    m = m_new;
  }
  const float sv = p.v_scales[kh];
  for (int u = 0; u * kWaveSize < p.d; ++u) out[u] = static_cast<float>(qflash::normalize(o[u], l)) * sv;
}

// I-ViT shiftmax over the whole row: the max, the sum of exp, then P (7 bits) and O in chunks of a
// wave's keys.
__device__ void shiftmax_row(const Params& p, long long* pw, int h, int kh, int i, int lo, int hi, int lane, float out[]) {
  const long long i0 = ivit::i0(static_cast<double>(p.q_scales[h]) * p.k_scales[kh] * p.scale);
  int mx = INT_MIN;
  for (int j = lo + lane; j < hi; j += kWaveSize)
    if (p.mask.visible(i, j)) mx = max(mx, logit(p, h, kh, i, j));
  mx = wave_max(mx);
  long long sum = 0;
  for (int j = lo + lane; j < hi; j += kWaveSize)
    if (p.mask.visible(i, j)) sum += ivit::exp(static_cast<long long>(logit(p, h, kh, i, j)) - mx, i0);
  sum = wave_sum(sum);
  const long long factor = (1LL << ivit::kDivBits) / sum;
  long long o[kMaxChannelsPerLane] = {};
  for (int j0 = lo; j0 < hi; j0 += kWaveSize) {
    const int j = j0 + lane;
    const bool vis = j < hi && p.mask.visible(i, j);
    pw[lane] = vis ? (factor * ivit::exp(static_cast<long long>(logit(p, h, kh, i, j)) - mx, i0)) >> (ivit::kDivBits - ivit::kPBits) : 0;
    wave_sync();
    const int w = min(kWaveSize, hi - j0);
    for (int u = 0; u * kWaveSize < p.d; ++u) {
      const int ch = lane + u * kWaveSize;
      for (int jj = 0; jj < w; ++jj) o[u] += pw[jj] * v_code(p, kh, j0 + jj, ch);
    }
    wave_sync();
  }
  const float sv = p.v_scales[kh];
  for (int u = 0; u * kWaveSize < p.d; ++u) out[u] = static_cast<float>(static_cast<double>(o[u]) * (1.0 / (1 << ivit::kPBits))) * sv;
}

template <IntegerSoftmax S>
__global__ void flash_integer_kernel(Params p) {
  extern __shared__ long long shared_p[];
  const int lane = threadIdx.x % kWaveSize, wave = threadIdx.x / kWaveSize;
  const int r = blockIdx.x * (blockDim.x / kWaveSize) + wave;
  if (r >= p.nrows) return;
  const int h = blockIdx.y, kh = h / (p.hq / p.hkv), i = p.rows[r];
  int lo = 0, hi = 0;
  p.mask.keys(i, lo, hi);
  float out[kMaxChannelsPerLane];
  if constexpr (S == IntegerSoftmax::qflash) {
    qflash_row(p, shared_p + wave * p.bc, h, kh, i, lo, hi, lane, out);
  } else {
    shiftmax_row(p, shared_p + wave * kWaveSize, h, kh, i, lo, hi, lane, out);
  }
  for (int u = 0; u * kWaveSize < p.d; ++u) p.out[(static_cast<long>(h) * p.nrows + r) * p.d + lane + u * kWaveSize] = out[u];
}


}  // namespace

std::vector<float> flash_integer(const IntegerInputs& in, const IntegerTuning& tuning) {
  const int ws = wave_size();
  const RowShapeRules shape("flash_integer", ws);
  shape.heads_and_dim(in.q_heads, in.kv_heads, in.tokens, in.dim);
  const bool qflash = in.softmax == IntegerSoftmax::qflash;
  if (qflash) shape.key_tile(in.block_k);
  const std::size_t qn = static_cast<std::size_t>(in.q_heads) * in.tokens * in.dim, kn = static_cast<std::size_t>(in.kv_heads) * in.tokens * in.dim;
  shape.require(in.q_codes.size() == qn && in.k_codes.size() == kn && in.v_codes.size() == kn, "q/k/v codes must hold heads * tokens * dim codes");
  shape.require(in.q_scales.size() == static_cast<std::size_t>(in.q_heads) && in.k_scales.size() == static_cast<std::size_t>(in.kv_heads) &&
              in.v_scales.size() == static_cast<std::size_t>(in.kv_heads),
          "q_scales need one scale per query head, k_scales and v_scales one per kv head");
  shape.rows(in.rows, in.tokens);
  const int waves = tuning.rows_per_block;
  const int shared = static_cast<int>(sizeof(long long)) * waves * (qflash ? in.block_k : ws);
  shape.launch(waves, shared);

  DeviceBuffers mem;
  Params p;
  p.q = mem.upload(pack_int8_words(in.q_codes));
  p.k = mem.upload(pack_int8_words(in.k_codes));
  p.v = mem.upload(in.v_codes);
  p.q_scales = mem.upload(in.q_scales);
  p.k_scales = mem.upload(in.k_scales);
  p.v_scales = mem.upload(in.v_scales);
  p.rows = mem.upload(in.rows);
  p.nrows = static_cast<int>(in.rows.size());
  p.hq = in.q_heads;
  p.hkv = in.kv_heads;
  p.n = in.tokens;
  p.d = in.dim;
  p.bc = in.block_k;
  p.mask = RowMask{in.tokens, in.causal, in.window};
  p.scale = in.softmax_scale;
  const std::size_t count = static_cast<std::size_t>(in.q_heads) * in.rows.size() * in.dim;
  float* out = mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  p.out = out;
  const dim3 grid((p.nrows + waves - 1) / waves, in.q_heads);
  if (qflash) {
    flash_integer_kernel<IntegerSoftmax::qflash><<<grid, waves * ws, shared>>>(p);
  } else {
    flash_integer_kernel<IntegerSoftmax::shiftmax><<<grid, waves * ws, shared>>>(p);
  }
  check_launch("flash_integer_kernel");
  return download(out, count);
}

}  // namespace qattn::gpu
