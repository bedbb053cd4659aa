// Generic flash attention: S = Q K^T (integer codes by dot4, or float values), online softmax in
// exp2 with the emulator's fp32 operations, P quantized against the running max through the lab's
// shared scalar codec, O += P V summed key by key by the recipe's accumulator model.
// One wave per query row; the tuning (waves per block) never changes a result.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/numerics/accumulator.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/exp2.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/online_softmax.hpp"
#include "kernels/gpu/common/output_format.hpp"  // round_output
#include "kernels/gpu/common/query_rows.hpp"
#include "kernels/gpu/prepare/prepare.hpp"

namespace qattn::gpu {

namespace {


struct Params {
  const int* q = nullptr;  // integer QK: codes packed four to an int32 word [H][N][d/4]
  const int* k = nullptr;
  const float *q_scales = nullptr, *k_scales = nullptr;  // integer QK: [H][N][groups]
  const float *qf = nullptr, *kf = nullptr;              // float QK: values [H][N][d]
  const float *q_rs = nullptr, *k_rs = nullptr;          // float QK: per (head, token) scales of the codes' sum, or null
  const float* q_rot = nullptr;    // block means with correction: Q before quantization [Hq][N][d]
  const float* k_means = nullptr;  // and the K block means [Hkv][mean_blocks][d]; null: no correction
  int mean_block = 1, mean_blocks = 0;
  const float* q_means = nullptr;  // Q smoothing: query-tile means [Hq][q_tiles][d]; null: none
  const float* k_smooth = nullptr; // and K after smoothing, before quantization [Hkv][N][d]
  int block_q = 1, q_tiles = 0;
  const float* v_means = nullptr;  // V smoothing: [Hkv][d]; null: none
  const float* v_scales = nullptr; // V's column scales, applied to O before / l: [Hkv][d]; null: none
  float tau = 0;
  const float* v = nullptr;
  const int* rows = nullptr;
  float* out = nullptr;
  int nrows = 0, hq = 0, hkv = 0, n = 0, d = 0, bc = 0, groups = 1;
  int splits = 1;           // split-K: key splits per row, merged by online softmax
  float* part_o = nullptr;  // split-K: each split's O [Hq][rows][splits][d]
  bool denominator_quantized = true;
  RowMask mask;  // the keys each query row sees
  Accumulator qk_acc, pv_acc;
  float c = 0, p_mult = 1;
  Format pf{};
  bool reverse_tiles = false;  // key tiles from the last visible one down to the first (order=reverse; one split)
  ExpForm exp_form = ExpForm::lab;
  RowSum row_sum = RowSum::sequential;
  Norm norm = Norm::div;
  Exp2Math exp2 = Exp2Math::rn;
};

// The softmax's exp2 as the recipe takes it: the emulator's correctly rounded one, or the
// special-function unit's (exp2=sfu). The emulator's table of the latter is the hardware's for
// arguments <= 0; with expform=fa the fused multiply-add can leave the row's largest score a residual
// above 0, where the two may differ by an ulp (the family's 30 dB rule holds; tau > 0 is refused).
struct Exp2Of {
  Exp2Math math;
  __device__ float operator()(float x) const { return math == Exp2Math::sfu ? sfu_ex2_ftz(x) : exp2_rn(x); }
};

// O / l as the recipe finishes it: a division, or O times fp32(1 / l) (rcp) or rcp.approx.ftz(l) (sfu).
__device__ inline float normalized(const Params& p, float o, float l) {
  if (p.norm == Norm::div) return o / l;
  return o * (p.norm == Norm::sfu ? sfu_rcp_ftz(l) : 1.0f / l);  // 1 / l: IEEE division (no fast math here)
}

// int32 dot of scale group g of query (h, i) and key (kh, j).
__device__ inline int group_logit(const Params& p, int h, int kh, int i, int j, int g) {
  const int words = p.d / 4, per_group = words / p.groups;
  const int* a = p.q + (static_cast<long>(h) * p.n + i) * words + g * per_group;
  const int* b = p.k + (static_cast<long>(kh) * p.n + j) * words + g * per_group;
  int s = 0;
  for (int w = 0; w < per_group; ++w) s = dot4_i8(a[w], b[w], s);
  return s;
}

// q_i . k_j before the softmax scale, as the emulator's Scorer forms it. Every multiply and add is
// rounded on its own (the build turns contraction off), in the emulator's order.
template <Dot4Qk QK>
__device__ float raw_score(const Params& p, int h, int kh, int i, int j) {
  float s = 0.0f;
  if constexpr (QK == Dot4Qk::integer) {
    const float* sa = p.q_scales + (static_cast<long>(h) * p.n + i) * p.groups;
    const float* sb = p.k_scales + (static_cast<long>(kh) * p.n + j) * p.groups;
    for (int g = 0; g < p.groups; ++g) s += static_cast<float>(group_logit(p, h, kh, i, j, g)) * (sa[g] * sb[g]);
  } else {
    const float* a = p.qf + (static_cast<long>(h) * p.n + i) * p.d;
    const float* b = p.kf + (static_cast<long>(kh) * p.n + j) * p.d;
    const auto term = [&](int c) { return static_cast<double>(a[c]) * static_cast<double>(b[c]); };  // exact
    const auto expo = [&](int c) { return factor_exponent(a[c], b[c], p.qk_acc.factor_exponent_min); };
    s = accumulate(p.qk_acc, 0.0f, p.d, term, expo);
    if (p.q_rs != nullptr || p.k_rs != nullptr) {  // codes' sum, then the scales, as the emulator
      const float sa = p.q_rs ? p.q_rs[static_cast<long>(h) * p.n + i] : 1.0f, sb = p.k_rs ? p.k_rs[static_cast<long>(kh) * p.n + j] : 1.0f;
      s = s * (sa * sb);
    }
  }
  if (p.q_means != nullptr) {
    // The smoothed Q lost its tile mean: dS = mean_q . k, in fp32, from K before quantization.
    const float* mu = p.q_means + (static_cast<long>(h) * p.q_tiles + i / p.block_q) * p.d;
    const float* kr = p.k_smooth + (static_cast<long>(kh) * p.n + j) * p.d;
    float ds = 0.0f;
    for (int c = 0; c < p.d; ++c) ds += mu[c] * kr[c];
    s += ds;
  }
  if (p.k_means != nullptr) {
    // A per-block K mean is exact under softmax only with q . mu_b added back, in fp32.
    const float* qa = p.q_rot + (static_cast<long>(h) * p.n + i) * p.d;
    const float* mu = p.k_means + (static_cast<long>(kh) * p.mean_blocks + j / p.mean_block) * p.d;
    float corr = 0.0f;
    for (int c = 0; c < p.d; ++c) corr += qa[c] * mu[c];
    s += corr;
  }
  return s;
}

// One split's online-softmax state: the running max, the denominator, the sum of the P that
// multiplies V (V smoothing) and this lane's output channels.
struct SplitState {
  float m = -INFINITY, l = 0.0f, lp = 0.0f;
  float m_pre = -INFINITY;  // expform=fa: the running max of the raw logits (before the exp2 scale)
  float lane_l[4] = {};     // rowsum=lanes: the four partial sums of l
  float o[kMaxChannelsPerLane] = {};
  // l as the merge reads it (rowsum=lanes: the quad's butterfly, (l0 + l2) + (l1 + l3)).
  __device__ float row_l(RowSum how) const { return how == RowSum::lanes ? (lane_l[0] + lane_l[2]) + (lane_l[1] + lane_l[3]) : l; }
};

// Key tiles [t_begin, t_end) of query (h, i) into st. pq, pt: this wave's P and denominator terms.
template <Dot4Qk QK>
__device__ void run_tiles(const Params& p, float* pq, float* pt, int h, int kh, int i, int hi, int t_begin, int t_end, int lane,
                          SplitState& st) {
  const float neg_inf = -INFINITY;
  const Exp2Of ex2{p.exp2};
  const bool fa = p.exp_form == ExpForm::fa;  // logits kept raw; exp2(fma(s, c, -m c)), as FlashAttention
  const int t_stop = min(t_end, (hi + p.bc - 1) / p.bc);  // the tiles that hold a key below hi
  for (int k = 0; k < t_stop - t_begin; ++k) {
    const int t = p.reverse_tiles ? t_stop - 1 - k : t_begin + k;
    const int j0 = t * p.bc, w = min(p.n, j0 + p.bc) - j0;
    // S = Q K^T for this lane's keys of the tile.
    float s_lane[kMaxKeysPerLane];
    float tile_max = neg_inf;
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize, j = j0 + jj;
      const float raw = jj < w && p.mask.visible(i, j) ? raw_score<QK>(p, h, kh, i, j) : neg_inf;
      const float s = fa || raw == neg_inf ? raw : raw * p.c;
      s_lane[u] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = wave_max(tile_max);
    float m_new, alpha;
    if (fa) {  // the max on raw logits; alpha from the raw maxes' difference times the scale
      const float m_pre = fmaxf(st.m_pre, tile_max);
      if (m_pre == neg_inf) continue;
      m_new = m_pre * p.c;
      alpha = st.m_pre == neg_inf ? 0.0f : ex2((st.m_pre - m_pre) * p.c);
      st.m_pre = m_pre;
    } else {
      m_new = fmaxf(st.m, tile_max);
      if (p.tau > 0 && st.m != neg_inf && m_new - st.m <= p.tau) m_new = st.m;  // lazy: P may reach 2^tau
      if (m_new == neg_inf) continue;
      alpha = rescale_factor(st.m, m_new, ex2);
    }
    // Online softmax: P against the running max, quantized with its static multiplier.
    for (int u = 0; u * kWaveSize < p.bc; ++u) {
      const int jj = lane + u * kWaveSize;
      const float s = s_lane[u];
      const float pf = s == neg_inf ? 0.0f : ex2(fa ? fmaf(s, p.c, -m_new) : s - m_new);
      const float q = static_cast<float>(decode(p.pf, quantize(p.pf, pf, p.p_mult)));
      if (jj < p.bc) {
        pq[jj] = jj < w ? q : 0.0f;
        pt[jj] = jj < w ? (p.denominator_quantized ? q : pf) : 0.0f;
      }
    }
    wave_sync();
    if (p.row_sum == RowSum::lanes) {  // every lane the same four partials, key 8b + 2k + e onto partial k
      for (float& x : st.lane_l) x *= alpha;
      for (int jj = 0; jj < w; ++jj) st.lane_l[(jj % 8) / 2] += pt[jj];
    } else {
      float row_sum = 0.0f;  // every lane the same sum, key by key as the emulator
      for (int jj = 0; jj < w; ++jj) row_sum += pt[jj];
      st.l = alpha * st.l + row_sum;
    }
    if (p.v_means != nullptr) {
      float pq_sum = 0.0f;
      for (int jj = 0; jj < w; ++jj) pq_sum += pq[jj];
      st.lp = alpha * st.lp + pq_sum;
    }
    // O = O * alpha, then O += P V: this lane's channels, the tile's keys in order.
    for (int u = 0; u * kWaveSize < p.d; ++u) {
      const int c = lane + u * kWaveSize;
      const float* vc = p.v + (static_cast<long>(kh) * p.n + j0) * p.d + c;
      if (p.pv_acc.kind == Accumulator::Kind::fp32) {  // the common model, without the generic path's float64
        float acc = st.o[u] * alpha;
        for (int jj = 0; jj < w; ++jj) acc += pq[jj] * vc[static_cast<long>(jj) * p.d];
        st.o[u] = acc;
      } else {
        const auto term = [&](int jj) { return static_cast<double>(pq[jj]) * static_cast<double>(vc[static_cast<long>(jj) * p.d]); };
        const auto expo = [&](int jj) { return factor_exponent(pq[jj], vc[static_cast<long>(jj) * p.d], p.pv_acc.factor_exponent_min); };
        st.o[u] = accumulate(p.pv_acc, st.o[u] * alpha, w, term, expo);
      }
    }
    wave_sync();
    st.m = m_new;
  }
}

template <Dot4Qk QK>
__global__ void flash_dot4_kernel(Params p) {
  extern __shared__ float shared_p[];
  const int lane = threadIdx.x % kWaveSize, wave = threadIdx.x / kWaveSize;
  const int r = blockIdx.x * (blockDim.x / kWaveSize) + wave;
  if (r >= p.nrows) return;
  const int h = blockIdx.y, kh = h / (p.hq / p.hkv), i = p.rows[r];
  float* pq = shared_p + wave * (2 * p.bc + 3 * p.splits);  // P as it multiplies V
  float* pt = pq + p.bc;                                     // the denominator's terms, summed in key order
  float* split_mllp = pt + p.bc;                             // each split's (m, l, lp)

  int lo = 0, hi = 0;
  p.mask.keys(i, lo, hi);
  // The row's key tiles, split as the emulator splits them: ceil(tiles / splits) per split.
  const int t0 = lo / p.bc, t1 = max(t0, (hi + p.bc - 1) / p.bc);
  const int per = max(1, (t1 - t0 + p.splits - 1) / p.splits);
  const float* v_mean = p.v_means == nullptr ? nullptr : p.v_means + static_cast<long>(kh) * p.d;
  const float* v_scale = p.v_scales == nullptr ? nullptr : p.v_scales + static_cast<long>(kh) * p.d;
  // O's channel c as the emulator finishes it: x scale, + mean x sum(P), / l.
  const auto finish = [&](float o_c, int c, float lp, float denom) {
    if (v_scale != nullptr) o_c *= v_scale[c];
    return normalized(p, v_mean == nullptr ? o_c : o_c + v_mean[c] * lp, denom);
  };
  float* out = p.out + (static_cast<long>(h) * p.nrows + r) * p.d;
  if (p.splits == 1) {
    SplitState st;
    run_tiles<QK>(p, pq, pt, h, kh, i, hi, t0, t1, lane, st);
    const float l = st.row_l(p.row_sum);
    const float denom = p.denominator_quantized ? l : l * p.p_mult;
    for (int u = 0; u * kWaveSize < p.d; ++u) {
      const int c = lane + u * kWaveSize;
      // 0 + o: the emulator's merge starts from +0, which turns a -0 (alpha = 0 times a negative O)
      // into +0.
      out[c] = finish(0.0f + st.o[u], c, st.lp, denom);
    }
    return;
  }
  // Split-K: each split from a fresh state, its partial kept (this lane's channels in part_o), then
  // the merge by online softmax in split order, as the emulator's finish().
  float* part = p.part_o + (static_cast<long>(h) * p.nrows + r) * p.splits * p.d;
  for (int sp = 0; sp < p.splits; ++sp) {
    SplitState st;
    run_tiles<QK>(p, pq, pt, h, kh, i, hi, min(t1, t0 + sp * per), min(t1, t0 + (sp + 1) * per), lane, st);
    if (lane == 0) {
      split_mllp[3 * sp] = st.m;
      split_mllp[3 * sp + 1] = st.row_l(p.row_sum);
      split_mllp[3 * sp + 2] = st.lp;
    }
    for (int u = 0; u * kWaveSize < p.d; ++u) part[sp * p.d + lane + u * kWaveSize] = st.o[u];
  }
  wave_sync();
  float big_m = -INFINITY;
  for (int sp = 0; sp < p.splits; ++sp) big_m = fmaxf(big_m, split_mllp[3 * sp]);
  float big_l = 0.0f, big_lp = 0.0f, o[kMaxChannelsPerLane] = {};
  for (int sp = 0; sp < p.splits; ++sp) {
    const float m = split_mllp[3 * sp], f = rescale_factor(m, big_m, Exp2Of{p.exp2});
    big_l += f * split_mllp[3 * sp + 1];
    big_lp += f * split_mllp[3 * sp + 2];
    for (int u = 0; u * kWaveSize < p.d; ++u) o[u] += f * part[sp * p.d + lane + u * kWaveSize];
  }
  const float denom = p.denominator_quantized ? big_l : big_l * p.p_mult;
  for (int u = 0; u * kWaveSize < p.d; ++u) {
    const int c = lane + u * kWaveSize;
    out[c] = finish(o[u], c, big_lp, denom);
  }
}

__global__ void logits_kernel(Params p, const int* hs, const int* is, const int* js, int count, int* result) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= count * p.groups) return;
  const int e = t / p.groups, g = t % p.groups;
  result[t] = group_logit(p, hs[e], hs[e] / (p.hq / p.hkv), is[e], js[e], g);
}

// The device's wave size (kWaveSize is per compiled architecture).
RowShapeRules rules() { return RowShapeRules("flash_dot4", wave_size()); }

void require(bool ok, const std::string& what) { rules().require(ok, what); }

// The scalar fields and the shape checks; array pointers are the caller's.
Params scalar_params(const Dot4Inputs& in) {
  const RowShapeRules shape = rules();
  shape.heads_and_dim(in.q_heads, in.kv_heads, in.tokens, in.dim);
  shape.key_tile(in.block_k);
  require(in.split_k >= 1 && in.split_k <= kMaxDot4Splits, "split_k must be in [1, " + std::to_string(kMaxDot4Splits) + "]");
  require(in.groups > 0 && in.dim % in.groups == 0 && (in.dim / in.groups) % 4 == 0,
          "groups " + std::to_string(in.groups) + " must divide the head dim into multiples of 4 channels");
  const std::size_t hn = static_cast<std::size_t>(in.tokens) * in.dim;
  require(in.v.size() == in.kv_heads * hn, "v must hold kv_heads * tokens * dim values");
  require(in.v_means.empty() || in.v_means.size() == static_cast<std::size_t>(in.kv_heads) * in.dim, "v_means must be empty or hold kv_heads * dim means");
  require(in.v_column_scales.empty() || in.v_column_scales.size() == static_cast<std::size_t>(in.kv_heads) * in.dim,
          "v_column_scales must be empty or hold kv_heads * dim scales");
  shape.rows(in.rows, in.tokens);
  Params p;
  p.nrows = static_cast<int>(in.rows.size());
  p.hq = in.q_heads;
  p.hkv = in.kv_heads;
  p.n = in.tokens;
  p.d = in.dim;
  p.bc = in.block_k;
  p.groups = in.groups;
  p.mask = RowMask{in.tokens, in.causal, in.window};
  p.denominator_quantized = in.denominator_quantized;
  require(!in.reverse_key_tiles || in.split_k == 1, "reverse key tiles run without key splits (split_k 1)");
  p.reverse_tiles = in.reverse_key_tiles;
  p.qk_acc = in.qk_acc;
  p.pv_acc = in.pv_acc;
  p.tau = in.lazy_rescale_tau;
  p.splits = in.split_k;
  p.c = in.score_factor;
  p.p_mult = in.p_multiplier;
  p.pf = format_of(in.p_format);
  require(in.exp_form != ExpForm::aten && in.row_sum != RowSum::vec16, "ATen's CPU exponential and row sum (expform=aten, rowsum=vec16) have no GPU form");
  require(kHasNvidiaSfu || (in.exp2 != Exp2Math::sfu && in.norm != Norm::sfu), "exp2=sfu and norm=sfu model NVIDIA's special-function unit");
  require(in.exp_form != ExpForm::fa || in.lazy_rescale_tau == 0, "expform=fa runs without a lazy rescale (tau 0)");
  p.exp_form = in.exp_form;
  p.row_sum = in.row_sum;
  p.norm = in.norm;
  p.exp2 = in.exp2;
  return p;
}

struct DeviceInputs {
  Params p{};
  DeviceBuffers mem;
  explicit DeviceInputs(const Dot4Inputs& in) : p(scalar_params(in)) {
    const std::size_t qn = static_cast<std::size_t>(in.q_heads) * in.tokens, kn = static_cast<std::size_t>(in.kv_heads) * in.tokens;
    if (in.qk == Dot4Qk::integer) {
      require(in.q_codes.size() == qn * in.dim && in.k_codes.size() == kn * in.dim, "q_codes / k_codes must hold heads * tokens * dim codes");
      require(in.q_scales.size() == qn * in.groups && in.k_scales.size() == kn * in.groups,
              "q_scales / k_scales must hold heads * tokens * groups scales");
      p.q = mem.upload(pack_int8_words(in.q_codes));
      p.k = mem.upload(pack_int8_words(in.k_codes));
      p.q_scales = mem.upload(in.q_scales);
      p.k_scales = mem.upload(in.k_scales);
    } else {
      require(in.q_values.size() == qn * in.dim && in.k_values.size() == kn * in.dim, "q_values / k_values must hold heads * tokens * dim values");
      p.qf = mem.upload(in.q_values);
      p.kf = mem.upload(in.k_values);
      require(in.q_row_scales.empty() || in.q_row_scales.size() == qn, "q_row_scales must hold heads * tokens scales or none");
      require(in.k_row_scales.empty() || in.k_row_scales.size() == kn, "k_row_scales must hold heads * tokens scales or none");
      if (!in.q_row_scales.empty()) p.q_rs = mem.upload(in.q_row_scales);
      if (!in.k_row_scales.empty()) p.k_rs = mem.upload(in.k_row_scales);
    }
    p.v = mem.upload(in.v);
    if (!in.v_means.empty()) p.v_means = mem.upload(in.v_means);
    if (!in.v_column_scales.empty()) p.v_scales = mem.upload(in.v_column_scales);
    p.rows = mem.upload(in.rows);
  }
};

// Launches on p (every pointer set) and returns [Hq, rows, d].
std::vector<float> launch(Dot4Qk qk, Params& p, DeviceBuffers& mem, const Dot4Tuning& tuning, FormatId out_format) {
  const int waves = tuning.rows_per_block;
  const int block = waves * wave_size(), shared = static_cast<int>(sizeof(float)) * waves * (2 * p.bc + 3 * p.splits);
  rules().launch(waves, shared);
  const std::size_t count = static_cast<std::size_t>(p.hq) * p.nrows * p.d;
  float* out = mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  p.out = out;
  if (p.splits > 1) p.part_o = mem.alloc<float>(count * p.splits);
  const dim3 grid((p.nrows + waves - 1) / waves, p.hq);
  switch (qk) {
    case Dot4Qk::integer: flash_dot4_kernel<Dot4Qk::integer><<<grid, block, shared>>>(p); break;
    case Dot4Qk::values: flash_dot4_kernel<Dot4Qk::values><<<grid, block, shared>>>(p); break;
  }
  check_launch("flash_dot4_kernel");
  round_output(out, count, out_format);
  return download(out, count);
}

}  // namespace

std::vector<float> flash_dot4(const Dot4Inputs& in, const Dot4Tuning& tuning) {
  DeviceInputs dev(in);
  return launch(in.qk, dev.p, dev.mem, tuning, in.out);
}

std::vector<float> flash_dot4_prepared(const Problem& p, const Recipe& r, const Dot4Inputs& in, const Dot4Tuning& tuning) {
  Params prm = scalar_params(in);
  require(in.q_heads == p.q.heads && in.kv_heads == p.k.heads && in.tokens == p.q.tokens && in.dim == p.q.dim,
          "the inputs' shape must be the problem's");
  DeviceBuffers mem;
  const float* q = mem.upload(p.q.data);
  const float* k = mem.upload(p.k.data);
  PrepareOptions opt;
  opt.with_v = false;  // V reaches this kernel as values, rounded on the host
  const DevicePrepared pr = prepare_device(q, k, nullptr, p.q.heads, p.k.heads, p.q.tokens, p.q.dim, r, mem, opt);
  if (in.qk == Dot4Qk::integer) {
    require(pr.q_codes != nullptr, "the recipe's Q and K are not integer codes, the inputs' qk is");
    // int8 codes [H][N][d] with d % 4 == 0 are the packed words' bytes in order (little endian).
    prm.q = reinterpret_cast<const int*>(pr.q_codes);
    prm.k = reinterpret_cast<const int*>(pr.k_codes);
    prm.q_scales = pr.q_scales;
    prm.k_scales = pr.k_scales;
    prm.groups = 1;
  } else {
    require(pr.q_values != nullptr, "the recipe's Q and K are integer codes, the inputs' qk is not");
    prm.qf = pr.q_values;
    prm.kf = pr.k_values;
  }
  if (r.q_smoothing) {
    prm.q_means = pr.q_block_means;
    prm.k_smooth = pr.k_float;
    prm.block_q = r.tiles.block_q;
    prm.q_tiles = pr.q_tiles;
  }
  if (r.k_smoothing == KSmoothing::block_mean_corrected) {
    prm.q_rot = pr.q_rot;
    prm.k_means = pr.k_block_means;
    prm.mean_block = k_mean_block_size(r);
    prm.mean_blocks = pr.k_mean_blocks;
  }
  prm.v = mem.upload(in.v);
  if (!in.v_means.empty()) prm.v_means = mem.upload(in.v_means);
  if (!in.v_column_scales.empty()) prm.v_scales = mem.upload(in.v_column_scales);
  prm.rows = mem.upload(in.rows);
  return launch(in.qk, prm, mem, tuning, in.out);
}

std::vector<int> dot4_logits(const Dot4Inputs& in, const std::vector<int>& h, const std::vector<int>& i, const std::vector<int>& j) {
  require(in.qk == Dot4Qk::integer, "dot4_logits needs integer Q and K");
  DeviceInputs dev(in);
  const int* hs = dev.mem.upload(h);
  const int* is = dev.mem.upload(i);
  const int* js = dev.mem.upload(j);
  const int count = static_cast<int>(h.size());
  int* res = dev.mem.alloc<int>(static_cast<std::size_t>(count) * in.groups);
  logits_kernel<<<(count * in.groups + 127) / 128, 128>>>(dev.p, hs, is, js, count, res);
  check_launch("logits_kernel");
  return download(res, static_cast<std::size_t>(count) * in.groups);
}

int dot4_wave_size() { return wave_size(); }

std::string device_name() { return query_device_name(); }

}  // namespace qattn::gpu
