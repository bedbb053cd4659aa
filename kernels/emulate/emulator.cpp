#include "kernels/emulate/emulator.hpp"

#include <omp.h>
#if defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/numerics/accumulator.hpp"
#include "kernels/numerics/prepare_cpu.hpp"
#include "kernels/numerics/qflash.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "kernels/problem/parallel_tasks.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/exp2.hpp"
#include "kernels/numerics/aten_math.hpp"
#include "kernels/numerics/sfu_math.hpp"
#include "kernels/recipe/knobs.hpp"  // validate
#include "kernels/formats/value_table.hpp"

namespace qattn {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// log2(e) rounded to fp32: kernels fold it into the softmax scale so that exp becomes exp2.
constexpr float kLog2e = 1.44269504088896340736f;

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace


namespace {

// One operand after quantization: values as the matmul sees them.
struct Operand {
  bool integer = false;
  std::vector<std::int16_t> codes;  // integer formats: signed codes [H, N, d] (int16: the dot product maps onto pmaddwd)
  std::vector<float> scales;       // integer formats: one per (h, n, group) (expanded); valid for
                                   // tensor/head/token/block/group granularities (QK^T and QFlash use those)
  int groups = 1;                  // scale groups along d
  TensorF values;                  // decode(code) * scale (both kinds); decode(code) alone with column_scales or row_scaled
  std::vector<float> column_scales;  // [H][d] when the scale is applied after P V (ScaleAfter::columns)
  bool row_scaled = false;         // a float operand's scale applied to the score (ScaleAfter::rows): scales holds one per (h, n)
};

// Where a float operand's scale is applied when a matrix unit's model sees its codes: not at all
// (values are decode(code) * scale), to O after P V (V: per head dim column), or to the score after
// Q K^T (Q, K: per token).
enum class ScaleAfter : std::uint8_t { none, columns, rows };

// ScaleAfter::columns (v_scaled_after_pv): a float operand whose scale is constant along the tokens
// keeps its codes' values (column_scales holds the scale of each (head, channel)), as a kernel feeds
// an MMA; ScaleAfter::rows (scaled_after_qk): one constant along the head dim does, scales holding
// the scale of each (head, token).
Operand prepare(const TensorF& x, const OperandQuant& oq, ScaleAfter after = ScaleAfter::none) {
  Operand o;
  const Format f = format_of(oq.spec.format);
  if (oq.unit_scale) {
    o.values = x;
    for (float& e : o.values.data) e = static_cast<float>(round_to(f, e));
    return o;
  }
  const QuantizedTensor qt = quantize(x, oq.spec);
  if (f.kind == Kind::integer) {
    o.integer = true;
    o.groups = oq.spec.granularity == Granularity::group ? x.dim / oq.spec.block : 1;
    o.codes.resize(qt.codes.size());
    for (std::size_t i = 0; i < qt.codes.size(); ++i) o.codes[i] = static_cast<std::int16_t>(decode(f, qt.codes[i]));
    o.scales.resize(static_cast<std::size_t>(x.heads) * x.tokens * o.groups);
    const int gsize = x.dim / o.groups;
    for (int h = 0; h < x.heads; ++h)
      for (int n = 0; n < x.tokens; ++n)
        for (int g = 0; g < o.groups; ++g)
          o.scales[(static_cast<std::size_t>(h) * x.tokens + n) * o.groups + g] = qt.scales[qt.scale_index(h, n, g * gsize)];
    o.values = dequantize(qt);  // an integer V in a float-softmax recipe multiplies P as values
    return o;
  }
  if (after != ScaleAfter::none) {
    o.values = TensorF(x.heads, x.tokens, x.dim);
    o.values.data = code_values(qt);
    if (after == ScaleAfter::columns) {
      o.column_scales = channel_scales(qt);
    } else {
      o.row_scaled = true;
      o.scales = token_scales(qt);
    }
    return o;
  }
  o.values = dequantize(qt);
  return o;
}

struct Prepared {
  Operand q, k, v;
  std::vector<float> k_block_means;  // for block_mean_corrected
  int k_smooth_block = 0;
  TensorF q_float;                   // Q after rotation, before quantization (for the q.mu correction)
  std::vector<float> q_block_means;  // q smoothing: per (head, query tile) channel means
  TensorF k_float;                   // q smoothing: K after smoothing, before quantization (dS = mean_q . K)
  std::vector<float> v_means;        // v smoothing: per (kv head) channel means
  std::vector<double> v_f64;         // V's values widened once (exact PV accumulation reads these)
  std::vector<float> q_group_sums;   // kzero=qsum: [Hq][N][groups], fp32 sums of Q's values before quantization
  std::vector<int> q_code_sums;      // kzero=qsum: [Hq][N][groups], sums of Q's codes (the zero point's share of the stored codes)
};

Prepared prepare_all(const Problem& p, const Recipe& r) {
  TensorF q = p.q, k = p.k;
  if (r.rotation == Rotation::hadamard) {
    if (!is_power_of_two(p.q.dim)) {
      throw std::invalid_argument("recipe field 'rotation': hadamard needs a power-of-two head dim, got " + std::to_string(p.q.dim));
    }
    hadamard_rows(q);
    hadamard_rows(k);
  }
  Prepared pr;
  pr.k_block_means = smooth_k(k, r);
  pr.k_smooth_block = r.k_smoothing_block > 0 ? r.k_smoothing_block : r.tiles.block_k;
  if (r.k_smoothing == KSmoothing::block_mean_corrected) pr.q_float = q;
  if (r.q_smoothing) {
    // SageAttention2: each query tile subtracts its own channel mean; dS = mean_q . K^T is added
    // back to the scores in fp32 (from K before quantization).
    pr.q_block_means = smooth_q(q, r.tiles.block_q);
    pr.k_float = k;
  }
  if (r.q_prescale) {
    // SageAttention: Q times the softmax scale in log2 units before its absmax, the factor formed in
    // double and passed to the kernel as fp32.
    const float c = static_cast<float>(p.scale() * 1.44269504);
    for (float& x : q.data) x *= c;
  }
  TensorF v = p.v;
  if (r.v_smoothing) pr.v_means = smooth_v(v);  // added back as mean * sum(P) / l
  const auto named = [](const char* name, const TensorF& x, const OperandQuant& oq, ScaleAfter after = ScaleAfter::none) {
    try {
      return prepare(x, oq, after);
    } catch (const NumericFailure& f) {
      throw NumericFailure(std::string("recipe field '") + name + ".scale': " + f.what());
    } catch (const std::invalid_argument& e) {  // a spec that does not fit this input (a group that does not divide d)
      throw std::invalid_argument(std::string("recipe field '") + name + "' on this input (d = " + std::to_string(x.dim) + "): " + e.what());
    }
  };
  // kvhead: Q's heads grouped by the KV head they share; K's and V's heads are the KV heads, one each.
  const Recipe grouped = kv_groups_for(r, p.q.heads, p.k.heads);
  const auto rows_if = [&](const OperandQuant& oq) { return scaled_after_qk(r, oq) ? ScaleAfter::rows : ScaleAfter::none; };
  pr.q = named("q", q, grouped.q, rows_if(r.q));
  if (r.k_zero_q_sum) {
    const int d = q.dim, g = pr.q.groups, gs = d / g;
    pr.q_group_sums.assign(static_cast<std::size_t>(q.heads) * q.tokens * g, 0.0f);
    pr.q_code_sums.assign(pr.q_group_sums.size(), 0);
    for (int h = 0; h < q.heads; ++h)
      for (int i = 0; i < q.tokens; ++i)
        for (int gi = 0; gi < g; ++gi) {
          const std::size_t at = (static_cast<std::size_t>(h) * q.tokens + i) * g + gi;
          const std::int16_t* codes = &pr.q.codes[(static_cast<std::size_t>(h) * q.tokens + i) * d];
          float s = 0;
          for (int c = gi * gs; c < (gi + 1) * gs; ++c) {
            s += q.row(h, i)[c];
            pr.q_code_sums[at] += codes[c];
          }
          pr.q_group_sums[at] = s;
        }
  }
  pr.k = named("k", k, grouped.k, rows_if(r.k));
  pr.v = named("v", v, grouped.v, v_scaled_after_pv(r) ? ScaleAfter::columns : ScaleAfter::none);
  if (r.pv_acc.kind == Accumulator::Kind::exact) pr.v_f64.assign(pr.v.values.data.begin(), pr.v.values.data.end());
  return pr;
}

int int_dot(const std::int16_t* a, const std::int16_t* b, int n) {
  int s = 0;
  for (int c = 0; c < n; ++c) s += static_cast<int>(a[c]) * static_cast<int>(b[c]);
  return s;
}

// Each product's exponent from its factors, as the fused MMA adder `acc` aligns them:
// a[c] * b[c * b_stride] (factor_exponent); 0 for zero products (which never set the max).
void factor_exponents(const Accumulator& acc, const float* a, const float* b, int b_stride, int n, std::vector<int>& exps) {
  exps.resize(static_cast<std::size_t>(n));
  for (int c = 0; c < n; ++c) {
    const float x = a[c], y = b[static_cast<std::size_t>(c) * b_stride];
    exps[static_cast<std::size_t>(c)] = factor_exponent(x, y, acc.factor_exponent_min);
  }
}

// Raw score q_i . k_j (before the softmax scale) as the kernel forms it.
class Scorer {
 public:
  Scorer(const Problem& p, const Recipe& r, const Prepared& pr) : p_(p), r_(r), pr_(pr), acc_(r.qk_acc) {
    // Float Q and K summed in fp32: K transposed once, [kv head][channel][key], so that a tile's
    // scores are formed several keys at a time (score_tile_fp32).
    fp32_tiles_ = !pr.q.integer && r.qk_acc.kind == Accumulator::Kind::fp32;
    if (fp32_tiles_) {
      const int n = p.k.tokens, d = p.k.dim;
      kt_.resize(static_cast<std::size_t>(p.k.heads) * d * n);
      for (int kh = 0; kh < p.k.heads; ++kh)
        for (int j = 0; j < n; ++j) {
          const float* b = pr.k.values.row(kh, j);
          for (int c = 0; c < d; ++c) kt_[(static_cast<std::size_t>(kh) * d + c) * n + j] = b[c];
        }
    }
  }

  bool fp32_tiles() const { return fp32_tiles_; }

  // Raw scores of keys j0 .. j0 + w - 1 for query row i, fp32 sums of fp32 products: what score()
  // computes key by key, here eight keys per vector lane group. Each key's sum still adds its
  // products in channel order from 0.0f, each product rounded to fp32 (exact in float64, so one
  // fp32 multiply rounds it identically) and no FMA (-ffp-contract=off): every score keeps its bits.
  void score_tile_fp32(int h, int kh, int i, int j0, int w, float* s) const {
    using v8f = float __attribute__((vector_size(32)));
    const int n = p_.k.tokens, d = p_.q.dim;
    const float* a = pr_.q.values.row(h, i);
    const float* kt = kt_.data() + static_cast<std::size_t>(kh) * d * n + j0;
    int jj = 0;
    for (; jj + 32 <= w; jj += 32) {  // four independent chains hide the add latency
      v8f acc[4] = {};
      for (int c = 0; c < d; ++c) {
        const float* b = kt + static_cast<std::size_t>(c) * n + jj;
        for (int g = 0; g < 4; ++g) {
          v8f bv;
          __builtin_memcpy(&bv, b + 8 * g, sizeof bv);
          acc[g] = acc[g] + a[c] * bv;
        }
      }
      __builtin_memcpy(s + jj, acc, sizeof acc);
    }
    for (; jj + 8 <= w; jj += 8) {
      v8f acc = {};
      for (int c = 0; c < d; ++c) {
        v8f bv;
        __builtin_memcpy(&bv, kt + static_cast<std::size_t>(c) * n + jj, sizeof bv);
        acc = acc + a[c] * bv;
      }
      __builtin_memcpy(s + jj, &acc, sizeof acc);
    }
    for (; jj < w; ++jj) {
      float acc = 0.0f;
      for (int c = 0; c < d; ++c) acc = acc + a[c] * kt[static_cast<std::size_t>(c) * n + jj];
      s[jj] = acc;
    }
    if (r_.q_smoothing || r_.k_smoothing == KSmoothing::block_mean_corrected)
      for (int u = 0; u < w; ++u) s[u] = corrected(h, kh, i, j0 + u, s[u]);
  }

  float score(int h, int kh, int i, int j, std::vector<double>& terms, std::vector<int>& exps) const {
    const int d = p_.q.dim;
    float s;
    if (pr_.q.integer) {
      const int g = pr_.q.groups, gs = d / g;
      const std::int16_t* a = &pr_.q.codes[(static_cast<std::size_t>(h) * p_.q.tokens + i) * d];
      const std::int16_t* b = &pr_.k.codes[(static_cast<std::size_t>(kh) * p_.k.tokens + j) * d];
      const float* sa = &pr_.q.scales[(static_cast<std::size_t>(h) * p_.q.tokens + i) * g];
      const float* sb = &pr_.k.scales[(static_cast<std::size_t>(kh) * p_.k.tokens + j) * g];
      if (r_.k_zero_q_sum) {
        // K's codes as stored, c + 8: sK (sQ sum((c + 8) q) - 8 sum(x)) per group, where sum(x) is
        // Q's unquantized sum, so the zero point's share carries none of Q's rounding.
        const std::size_t at = (static_cast<std::size_t>(h) * p_.q.tokens + i) * g;
        const float* qs = &pr_.q_group_sums[at];
        s = 0;
        for (int gi = 0; gi < g; ++gi) {
          const int stored = int_dot(a + gi * gs, b + gi * gs, gs) + 8 * pr_.q_code_sums[at + gi];
          s += sb[gi] * (static_cast<float>(stored) * sa[gi] - 8.0f * qs[gi]);
        }
      } else if (g == 1) {
        s = r_.qk_scale_sequential ? static_cast<float>(int_dot(a, b, d)) * sa[0] * sb[0] : static_cast<float>(int_dot(a, b, d)) * (sa[0] * sb[0]);
      } else {
        s = 0;  // llama.cpp-style blocks: one int dot per group, scaled and summed in fp32
        for (int gi = 0; gi < g; ++gi) s += static_cast<float>(int_dot(a + gi * gs, b + gi * gs, gs)) * (sa[gi] * sb[gi]);
      }
    } else {
      const float* a = pr_.q.values.row(h, i);
      const float* b = pr_.k.values.row(kh, j);
      terms.resize(d);
      for (int c = 0; c < d; ++c) terms[c] = static_cast<double>(a[c]) * b[c];
      if (r_.qk_acc.fused) {
        factor_exponents(r_.qk_acc, a, b, 1, d, exps);
        s = acc_.add(0.0f, terms, exps);
      } else {
        s = acc_.add(0.0f, terms);
      }
      if (pr_.q.row_scaled || pr_.k.row_scaled) {  // codes' sum, then the scales, as the integer path
        const float sa = pr_.q.row_scaled ? pr_.q.scales[static_cast<std::size_t>(h) * p_.q.tokens + i] : 1.0f;
        const float sb = pr_.k.row_scaled ? pr_.k.scales[static_cast<std::size_t>(kh) * p_.k.tokens + j] : 1.0f;
        s = r_.qk_scale_sequential ? s * sa * sb : s * (sa * sb);
      }
    }
    return corrected(h, kh, i, j, s);
  }

 private:
  // The score corrections of Q smoothing (dS) and of per-block K means (q . mu), added in fp32.
  float corrected(int h, int kh, int i, int j, float s) const {
    const int d = p_.q.dim;
    if (r_.q_smoothing) {
      const int br = r_.tiles.block_q, tiles = (p_.q.tokens + br - 1) / br;
      const float* mu = &pr_.q_block_means[(static_cast<std::size_t>(h) * tiles + i / br) * d];
      const float* kr = pr_.k_float.row(kh, j);
      float ds = 0;
      for (int c = 0; c < d; ++c) ds += mu[c] * kr[c];
      s += ds;
    }
    if (r_.k_smoothing == KSmoothing::block_mean_corrected) {
      // Add back q . mu_b for this key's block, in fp32: the exact correction of a per-block mean.
      const int blocks = (p_.k.tokens + pr_.k_smooth_block - 1) / pr_.k_smooth_block;
      const float* mu = &pr_.k_block_means[(static_cast<std::size_t>(kh) * blocks + j / pr_.k_smooth_block) * d];
      const float* qa = pr_.q_float.row(h, i);
      float corr = 0;
      for (int c = 0; c < d; ++c) corr += qa[c] * mu[c];
      s += corr;
    }
    return s;
  }

  const Problem& p_;
  const Recipe& r_;
  const Prepared& pr_;
  AccumulatorModel acc_;
  bool fp32_tiles_ = false;
  std::vector<float> kt_;
};

struct RowOut {
  std::vector<float> o;
  std::vector<double> weights;  // effective weight per key (prob rows only)
};

using v4d_t = double __attribute__((vector_size(32)));

// acc + p * v. A product of two fp32 values is exact in float64 (24 + 24 bits <= 53), so a fused
// multiply-add rounds exactly as the separate multiply and add do: FMA here changes no bit, only
// the speed.
inline v4d_t fused_mul_add(double p, v4d_t v, v4d_t acc) {
#if defined(__FMA__)
  return reinterpret_cast<v4d_t>(_mm256_fmadd_pd(_mm256_set1_pd(p), reinterpret_cast<__m256d>(v), reinterpret_cast<__m256d>(acc)));
#else
  return acc + p * v;
#endif
}

// The tiled online softmax of one query row, as a state advanced one key tile at a time, so that
// a block of rows can share each K/V tile while it is in cache, as a kernel's query tile does.
// Each row's arithmetic is the same whatever its neighbours: results do not depend on blocking.
class RowEmulator {
 public:
  RowEmulator(const Problem& p, const Recipe& r, const Prepared& pr, const Scorer& scorer)
      : p_(p), r_(r), pr_(pr), scorer_(scorer), pv_(r.pv_acc), pf_(format_of(r.p.spec.format)),
        p_mult_(r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier)),
        c_(r.q_prescale ? 1.0f : static_cast<float>(p.scale()) * kLog2e),  // fp32, as a kernel holds it (1: Q carries it)
        // Soft-capping as FlashAttention's kernels fold it: tanh of the raw score times
        // scale / cap, then cap * log2(e) as the exp2 scale (both factors held in fp32).
        cap_in_(p.softcap > 0 ? static_cast<float>(p.scale() / p.softcap) : 0.0f),
        cap_out_(p.softcap > 0 ? static_cast<float>(p.softcap) * kLog2e : 0.0f),
        ex2_(r.exp2 == Exp2Math::sfu ? &ex2_approx_ftz : &exp2_rn),
        scale_(static_cast<float>(p.scale())),
        rounder_(pf_.bits <= 16 && pf_.specials != Specials::e8m0 ? std::optional<NonNegativeRounder>(pf_) : std::nullopt) {
    for (const double slope : p.alibi) alibi_raw_.push_back(static_cast<float>(slope / p.scale()));
  }

  struct Split {
    float m = kNegInf, l = 0, lp = 0;  // lp: sum of the P that multiplies V (for V smoothing)
    float m_pre = kNegInf;             // expform=fa: the running max of the raw (pre-scale) logits
    float lane_l[4] = {0, 0, 0, 0};    // rowsum=lanes: the four partial sums of l
    std::vector<float> o;
  };
  struct Row {
    int h = 0, i = 0, t0 = 0, t1 = 0, per_split = 1;
    int chunk_keys = 0;  // split.pad: keys per split, counted in cache cells from key 0 (0: per_split tiles)
    bool want_weights = false;
    std::vector<Split> splits;
    std::vector<double> weights;  // P as quantized, then rescaled in finish()
    std::vector<float> m_at_key;  // running max when each key was quantized
    std::vector<int> split_of_key;
  };

  Row start(int h, int i, bool want_weights) const {
    const int n = p_.k.tokens, bc = r_.tiles.block_k;
    Row row;
    row.h = h;
    row.i = i;
    // Visible key range, in whole tiles as a kernel iterates them.
    const auto [lo, hi] = p_.visible_keys(i);
    row.t0 = lo / bc;
    row.t1 = std::max(row.t0, (hi + bc - 1) / bc);
    row.per_split = std::max(1, (row.t1 - row.t0 + r_.split_k - 1) / r_.split_k);
    if (r_.split_pad > 0) {
      const int cells = std::max(r_.split_pad, (hi + r_.split_pad - 1) / r_.split_pad * r_.split_pad);
      row.chunk_keys = cells < r_.split_min ? cells : (cells + r_.split_k - 1) / r_.split_k;
    }
    row.splits.resize(r_.split_k);
    for (Split& sp : row.splits) sp.o.assign(p_.v.dim, 0.0f);
    row.want_weights = want_weights;
    if (want_weights) {
      row.weights.assign(n, 0.0);
      row.m_at_key.assign(n, kNegInf);
      row.split_of_key.assign(n, -1);
    }
    return row;
  }

  // A raw score in the exp2 domain: times the softmax scale and log2(e), or soft-capped. tanh is
  // float64's rounded to fp32 (PTX's tanh.approx.f32, which FlashAttention's soft-cap uses, is
  // vendor math the lab does not model yet).
  //
  // ALiBi as FlashAttention-2 adds it: to the raw score, the slope held as fp32(slope / scale) and
  // times the distance |i - j| in fp32, before the exp2 scale (its causal kernels add slope * j
  // instead, equal up to a row constant but rounded differently: not modelled).
  float logit2(float raw, int h, int i, int j) const { return logit_pre(raw, h, i, j) * exp2_scale(); }
  // The logit before the exp2 scale (the raw score, less ALiBi's distance term, or its tanh when
  // soft-capped), and that scale: logit2 is their fp32 product.
  float logit_pre(float raw, int h, int i, int j) const {
    if (!alibi_raw_.empty()) raw -= alibi_raw_[static_cast<std::size_t>(h)] * static_cast<float>(std::abs(i - j));
    if (cap_in_ == 0.0f) return raw;
    return static_cast<float>(std::tanh(static_cast<double>(raw * cap_in_)));
  }
  float exp2_scale() const { return cap_in_ == 0.0f ? c_ : cap_out_; }

  // l's update by one tile's values (rowsum=sequential: their sum, key by key, added into the
  // rescaled l; lanes: each key onto its lane's rescaled partial, the lanes combined in finish()).
  void add_to_l(Split& sp, float alpha, const float* values, int count) const {
    if (r_.row_sum == RowSum::vec16) {
      const int whole = count - count % 16;
      float lane[16] = {};
      for (int jj = 0; jj < whole; ++jj) lane[jj % 16] += values[jj];
      for (int half = 8; half >= 1; half /= 2)
        for (int k = 0; k < half; ++k) lane[k] += lane[k + half];
      float sum = lane[0];
      for (int jj = whole; jj < count; ++jj) sum += values[jj];
      sp.l = std::fma(alpha, sp.l, sum);
      return;
    }
    if (r_.row_sum == RowSum::lanes) {
      for (float& x : sp.lane_l) x *= alpha;
      for (int jj = 0; jj < count; ++jj) sp.lane_l[(jj % 8) / 2] += values[jj];
      return;
    }
    float sum = 0;
    for (int jj = 0; jj < count; ++jj) sum += values[jj];
    sp.l = alpha * sp.l + sum;
  }

  // Key tile t for this row (nothing if outside its visible tiles).
  void step(Row& row, int t) {
    if (t < row.t0 || t >= row.t1) return;
    const int n = p_.k.tokens, d = p_.v.dim, kh = row.h / p_.group(), bc = r_.tiles.block_k;  // d: V's head dim (O's)
    const int spi = row.chunk_keys > 0 ? std::min(r_.split_k - 1, t * r_.tiles.block_k / row.chunk_keys) : (t - row.t0) / row.per_split;
    Split& sp = row.splits[spi];
    const int j0 = t * bc, j1 = std::min(n, j0 + bc), w = j1 - j0;
    // pad=zero: the keys past N of a partial last tile score 0 against V = 0 (they enter m and l).
    const int wt = r_.pad_keys_zero && !p_.causal ? std::max(w, std::min(bc, (n + bc - 1) / bc * bc - j0)) : w;
    s_.resize(bc);
    pq_.resize(bc);
    float tile_max = kNegInf;
    // A row's visible keys form one interval: checking the tile's ends decides the whole tile.
    const bool all_visible = p_.visible(row.i, j0) && p_.visible(row.i, j1 - 1);
    // s_: the logits in exp2 units (expform=fa: before the exp2 scale, as FlashAttention keeps them).
    const bool fa = r_.exp_form == ExpForm::fa, aten = r_.exp_form == ExpForm::aten;
    // expform=aten: the score times the softmax scale, in natural-log units (ATen's qk * scaling_factor).
    const auto logit = [&](float raw, int j) {
      return fa ? logit_pre(raw, row.h, row.i, j) : aten ? logit_pre(raw, row.h, row.i, j) * scale_ : logit2(raw, row.h, row.i, j);
    };
    if (all_visible && scorer_.fp32_tiles()) {
      scorer_.score_tile_fp32(row.h, kh, row.i, j0, w, s_.data());
      for (int jj = 0; jj < w; ++jj) {
        s_[jj] = logit(s_[jj], j0 + jj);
        tile_max = std::max(tile_max, s_[jj]);
      }
    } else {
      for (int jj = 0; jj < w; ++jj) {
        const int j = j0 + jj;
        s_[jj] = all_visible || p_.visible(row.i, j) ? logit(scorer_.score(row.h, kh, row.i, j, terms_, exps_), j) : kNegInf;
        tile_max = std::max(tile_max, s_[jj]);
      }
    }
    for (int jj = w; jj < wt; ++jj) tile_max = std::max(tile_max, 0.0f);
    const float c2 = exp2_scale();
    float m_new, alpha;
    if (fa) {  // max on raw logits; exp2(fma(s, c, -fp32(m c))); alpha from the raw maxes' difference
      const float m_pre = std::max(sp.m_pre, tile_max);
      if (m_pre == kNegInf) return;
      m_new = m_pre * c2;
      alpha = sp.m_pre == kNegInf ? 0.0f : ex2_((sp.m_pre - m_pre) * c2);
      sp.m_pre = m_pre;
    } else {
      m_new = std::max(sp.m, tile_max);
      // Lazy rescale (FlashAttention-4): keep the old max while it grew by at most tau.
      if (r_.lazy_rescale_tau > 0 && sp.m != kNegInf && m_new - sp.m <= static_cast<float>(r_.lazy_rescale_tau)) m_new = sp.m;
      if (m_new == kNegInf) return;  // nothing visible yet
      alpha = sp.m == kNegInf ? 0.0f : aten ? exp_rn(sp.m - m_new) : ex2_(sp.m - m_new);
    }
    // expform=aten: ATen's vectorized exp on the tile's whole 16-key vectors, std::exp on the rest.
    const int vectors = w - w % 16;
    const auto p_at = [&](float s, int jj) {
      if (s == kNegInf) return 0.0f;
      if (aten) return jj < vectors ? aten_fexp_u20(s - m_new) : exp_rn(s - m_new);
      return ex2_(fa ? std::fma(s, c2, -m_new) : s - m_new);
    };
    const auto p_of = [&](float s) { return p_at(s, 0); };
    float pq_sum = 0;
    l_terms_.resize(wt);
    for (int jj = 0; jj < w; ++jj) {
      const float pv_float = p_at(s_[jj], jj);
      // P quantized against the running max with the static multiplier: value in the code domain.
      pq_[jj] = rounder_ ? rounder_->round(pv_float * p_mult_) : static_cast<float>(decode(pf_, quantize(pf_, pv_float, p_mult_)));
      l_terms_[jj] = r_.denominator == Denominator::quantized_p ? pq_[jj] : pv_float;
      pq_sum += pq_[jj];
      if (row.want_weights) {
        row.m_at_key[j0 + jj] = m_new;
        row.split_of_key[j0 + jj] = spi;
        row.weights[j0 + jj] = pq_[jj];
      }
    }
    for (int jj = w; jj < wt; ++jj) {  // padded keys: P of a zero score; V = 0, so only l sees them
      const float pv_float = p_of(0.0f);
      const float pq = rounder_ ? rounder_->round(pv_float * p_mult_) : static_cast<float>(decode(pf_, quantize(pf_, pv_float, p_mult_)));
      l_terms_[jj] = r_.denominator == Denominator::quantized_p ? pq : pv_float;
    }
    add_to_l(sp, alpha, l_terms_.data(), wt);
    sp.lp = alpha * sp.lp + pq_sum;
    std::vector<float>& o = sp.o;
    for (int cc = 0; cc < d; ++cc) o[cc] *= alpha;
    const TensorF& vv = pr_.v.values;
    switch (r_.pv_acc.kind) {
      case Accumulator::Kind::exact: {
        // Float64 sums of the products of fp32 values over the tile (error ~2^-53 relative per
        // add, far below the fp32 rounding that follows), eight output channels at a time.
        using v4f = float __attribute__((vector_size(16)));
        using v4d = double __attribute__((vector_size(32)));
        const float* vbase = vv.row(kh, j0);
        int cc = 0;
        // Sixteen channels: four independent add chains hide the add latency. Each channel is
        // still summed over the keys in order, so the result is the same as one channel at a time.
        const double* v64 = pr_.v_f64.data() + vv.index(kh, j0, 0);
        for (; cc + 16 <= d; cc += 16) {
          v4d acc[4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
          for (int jj = 0; jj < w; ++jj) {
            const double pj = pq_[jj];
            const double* vr = v64 + static_cast<std::size_t>(jj) * d + cc;
            for (int g = 0; g < 4; ++g) {
              v4d a;
              __builtin_memcpy(&a, vr + 4 * g, sizeof a);
              acc[g] = fused_mul_add(pj, a, acc[g]);
            }
          }
          for (int g = 0; g < 4; ++g)
            for (int u = 0; u < 4; ++u) o[cc + 4 * g + u] = static_cast<float>(static_cast<double>(o[cc + 4 * g + u]) + acc[g][u]);
        }
        for (; cc + 8 <= d; cc += 8) {
          v4d acc_lo = {0, 0, 0, 0}, acc_hi = {0, 0, 0, 0};
          for (int jj = 0; jj < w; ++jj) {
            const double pj = pq_[jj];
            const float* vr = vbase + static_cast<std::size_t>(jj) * d + cc;
            v4f a, b;
            __builtin_memcpy(&a, vr, sizeof a);
            __builtin_memcpy(&b, vr + 4, sizeof b);
            acc_lo += pj * __builtin_convertvector(a, v4d);
            acc_hi += pj * __builtin_convertvector(b, v4d);
          }
          for (int u = 0; u < 4; ++u) {
            o[cc + u] = static_cast<float>(static_cast<double>(o[cc + u]) + acc_lo[u]);
            o[cc + 4 + u] = static_cast<float>(static_cast<double>(o[cc + 4 + u]) + acc_hi[u]);
          }
        }
        for (; cc < d; ++cc) {
          double acc1 = 0;
          for (int jj = 0; jj < w; ++jj) acc1 += static_cast<double>(pq_[jj]) * vbase[static_cast<std::size_t>(jj) * d + cc];
          o[cc] = static_cast<float>(static_cast<double>(o[cc]) + acc1);
        }
        break;
      }
      case Accumulator::Kind::fp32:
        for (int jj = 0; jj < w; ++jj) {
          const float* vr = vv.row(kh, j0 + jj);
          const float pj = pq_[jj];
          for (int cc = 0; cc < d; ++cc) o[cc] += pj * vr[cc];
        }
        break;
      default:
        terms_.resize(w);
        for (int cc = 0; cc < d; ++cc) {
          for (int jj = 0; jj < w; ++jj) terms_[jj] = static_cast<double>(pq_[jj]) * vv(kh, j0 + jj, cc);
          if (r_.pv_acc.fused) {
            factor_exponents(r_.pv_acc, pq_.data(), vv.row(kh, j0) + cc, d, w, exps_);
            o[cc] = pv_.add(o[cc], terms_, exps_);
          } else {
            o[cc] = pv_.add(o[cc], terms_);
          }
        }
    }
    sp.m = m_new;
  }

  // Merge split partials by online softmax (one split: the identity) and normalize.
  void finish(Row& row, RowOut& out) const {
    const int n = p_.k.tokens, d = p_.v.dim, kh = row.h / p_.group();
    float M = kNegInf;
    for (const Split& sp : row.splits) M = std::max(M, sp.m);
    float L = 0, LP = 0;
    out.o.assign(d, 0.0f);
    std::vector<float> f(row.splits.size());
    for (std::size_t k = 0; k < row.splits.size(); ++k) {
      const Split& sp = row.splits[k];
      f[k] = sp.m == kNegInf ? 0.0f : ex2_(sp.m - M);
      // rowsum=lanes: the quad's butterfly (shuffles by lane xor 2, then xor 1).
      const float l = r_.row_sum == RowSum::lanes ? (sp.lane_l[0] + sp.lane_l[2]) + (sp.lane_l[1] + sp.lane_l[3]) : sp.l;
      L += f[k] * l;
      LP += f[k] * sp.lp;
      for (int cc = 0; cc < d; ++cc) out.o[cc] += f[k] * sp.o[cc];
    }
    // A sink's weight, exp2 of its logit in log2 units against the merged max, joins l in the
    // epilogue (it multiplies no V and is never rounded to P's format).
    const float sink = p_.sinks.empty() || M == kNegInf ? 0.0f : ex2_(static_cast<float>(p_.sinks[row.h]) * kLog2e - M);
    const float denom = r_.denominator == Denominator::quantized_p ? L + sink * p_mult_ : (L + sink) * p_mult_;
    if (!pr_.v.column_scales.empty()) {  // (O x scale) / l, the kernels' order
      const float* vs = &pr_.v.column_scales[static_cast<std::size_t>(kh) * d];
      for (int cc = 0; cc < d; ++cc) out.o[cc] *= vs[cc];
    }
    if (r_.v_smoothing) {
      const float* mu = &pr_.v_means[static_cast<std::size_t>(kh) * d];
      for (int cc = 0; cc < d; ++cc) out.o[cc] += mu[cc] * LP;  // mean * sum(P), in the same scaled domain
    }
    if (r_.norm != Norm::div) {
      const float inv = r_.norm == Norm::sfu ? rcp_approx_ftz(denom) : 1.0f / denom;
      for (int cc = 0; cc < d; ++cc) out.o[cc] *= inv;
    } else {
      for (int cc = 0; cc < d; ++cc) out.o[cc] /= denom;
    }
    if (row.want_weights) {
      out.weights = std::move(row.weights);
      for (int j = 0; j < n; ++j) {
        const int sp = row.split_of_key[j];
        if (sp < 0) continue;
        // The factors the online softmax applied to this key's P afterwards, in float64.
        const double dm = static_cast<double>(row.m_at_key[j]) - row.splits[sp].m;  // expform=aten: natural-log units
        out.weights[j] *= (r_.exp_form == ExpForm::aten ? std::exp(dm) : std::exp2(dm)) * f[sp] / denom;
      }
    }
  }

 private:
  const Problem& p_;
  const Recipe& r_;
  const Prepared& pr_;
  const Scorer& scorer_;
  AccumulatorModel pv_;
  Format pf_;
  float p_mult_, c_, cap_in_, cap_out_;
  float (*ex2_)(float);  // the softmax's exp2 (exp2=rn: correctly rounded; sfu: the H100's ex2.approx.ftz)
  float scale_;          // expform=aten: the softmax scale, fp32
  std::optional<NonNegativeRounder> rounder_;
  std::vector<float> alibi_raw_;  // ALiBi's slopes over the softmax scale, fp32 (one per query head)
  std::vector<double> terms_;
  std::vector<int> exps_;
  std::vector<float> s_, pq_, l_terms_;
};

// A block of query rows of one head, key tile by key tile.
void run_block(const Problem& p, const Recipe& r, const Prepared& pr, const Scorer& scorer, int h, const int* rows, int count,
               bool want_weights, std::vector<RowOut>& outs) {
  RowEmulator emu(p, r, pr, scorer);
  std::vector<RowEmulator::Row> state;
  int t_lo = std::numeric_limits<int>::max(), t_hi = 0;
  for (int k = 0; k < count; ++k) {
    state.push_back(emu.start(h, rows[k], want_weights));
    t_lo = std::min(t_lo, state.back().t0);
    t_hi = std::max(t_hi, state.back().t1);
  }
  if (r.reverse_key_tiles) {
    for (int t = t_hi - 1; t >= t_lo; --t)
      for (auto& row : state) emu.step(row, t);
  } else {
    for (int t = t_lo; t < t_hi; ++t)
      for (auto& row : state) emu.step(row, t);
  }
  outs.resize(count);
  for (int k = 0; k < count; ++k) emu.finish(state[k], outs[k]);
}

// QFlash's constants for a row: the lab's (from s~ with the exact log2 e) or the published kernel's
// (s_Q s_K rounded to fp16 as torch multiplies two half scalars, the softmax scale times its
// 1.44269504, every constant rounded half to even as Python's round does).
qflash::Constants qflash_constants(const Problem& p, const Recipe& r, float sq, float sk) {
  if (r.qflash.constants == QFlashVariant::Constants::lab) {
    const double s_tilde = static_cast<double>(sq) * sk * p.scale() * qflash::kLog2e;
    check_integer_softmax_step(s_tilde, "qflash");
    return qflash::constants(s_tilde);
  }
  const double qk = round_to(format_of(FormatId::fp16), static_cast<double>(sq * sk));
  const double sm = p.scale() * 1.44269504 * qk;
  check_integer_softmax_step(sm, "qflash");
  qflash::Constants c;
  c.i0 = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::nearbyint(1.0 / sm)));
  c.m = static_cast<std::int64_t>(127.0 * 32768.0 / static_cast<double>(c.i0) + 0.5);
  c.exp_m = static_cast<std::int64_t>(std::nearbyint(-sm * 65536.0));
  c.req_m = static_cast<std::int64_t>(std::nearbyint(sm * 127.0 * 65536.0));
  c.m30 = static_cast<std::int64_t>(std::nearbyint(1073741824.0 / static_cast<double>(c.i0)));
  return c;
}

// QFlash's integer pipeline for one query row (see qflash.hpp for every constant; recipe.hpp's
// QFlashVariant for the published kernel's steps).
void run_row_qflash(const Problem& p, const Recipe& r, const Prepared& pr, int h, int i, bool want_weights, RowOut& out) {
  const int n = p.k.tokens, d = p.q.dim, dv = p.v.dim, kh = h / p.group(), bc = r.tiles.block_k;
  const QFlashVariant& vr = r.qflash;
  const float sq = pr.q.scales[(static_cast<std::size_t>(h) * p.q.tokens + i)];
  const float sk = pr.k.scales[static_cast<std::size_t>(kh) * p.k.tokens];
  const qflash::Constants c = qflash_constants(p, r, sq, sk);
  const auto exp2 = [&](std::int64_t x) { return vr.exp == QFlashVariant::Exp::fixed16 ? qflash::shift_exp2_fixed16(x, c) : qflash::shift_exp2(x, c); };
  const auto requant = [&](std::int64_t x) { return vr.requant == QFlashVariant::Requant::round16 ? qflash::requantize_round16(x, c) : qflash::requantize(x, c); };
  const auto release = [&](std::int64_t x, std::int64_t a) {
    return vr.release == QFlashVariant::Release::shift30 ? qflash::scale_release_shift30(x, a, c) : qflash::scale_release(x, a, c);
  };
  const bool pad = vr.tail == QFlashVariant::Tail::pad;
  constexpr std::int64_t kPadScore = -(std::int64_t{1} << 20);  // the kernel's NEG_INF for keys past N
  const std::int16_t* qa = &pr.q.codes[(static_cast<std::size_t>(h) * p.q.tokens + i) * d];
  const auto [lo, hi] = p.visible_keys(i);
  const bool kernel_start = vr.start == QFlashVariant::Start::kernel;
  std::int64_t m = kernel_start ? -(std::int64_t{1} << 20) : -(std::int64_t{1} << 21), l = kernel_start ? 1 : 0;
  std::vector<std::int64_t> o(dv, 0), sc(bc), p8(bc);
  // Weights: each key's P8 and the tile it came from; the release factors alpha / I0 of later tiles.
  std::vector<std::int64_t> key_p8(want_weights ? n : 0, 0);
  std::vector<int> key_tile(want_weights ? n : 0, -1);
  std::vector<double> release_factor;
  for (int j0 = (lo / bc) * bc; j0 < hi; j0 += bc) {
    const int w = std::min(n, j0 + bc) - j0;
    const int wt = pad && j0 + bc > n ? bc : w;  // padded keys take part in the max, P8 and l (with V = 0)
    std::int64_t tile_max = std::numeric_limits<std::int64_t>::min();
    for (int jj = 0; jj < wt; ++jj) {
      const int j = j0 + jj;
      const bool vis = jj < w && p.visible(i, j);
      sc[jj] = vis ? int_dot(qa, &pr.k.codes[(static_cast<std::size_t>(kh) * p.k.tokens + j) * d], d) : (jj >= w ? kPadScore : 0);
      p8[jj] = vis || jj >= w;  // takes part (visible, or a padded key), reused below
      if (p8[jj]) tile_max = std::max(tile_max, sc[jj]);
    }
    if (tile_max == std::numeric_limits<std::int64_t>::min()) continue;
    const std::int64_t m_new = std::max(m, tile_max);
    const std::int64_t alpha = exp2(m - m_new);
    std::int64_t row_sum = 0;
    for (int jj = 0; jj < wt; ++jj) {
      p8[jj] = p8[jj] ? requant(exp2(sc[jj] - m_new)) : 0;
      row_sum += p8[jj];
    }
    l = release(l, alpha) + row_sum;
    if (want_weights) {
      release_factor.push_back(static_cast<double>(alpha) / static_cast<double>(c.i0));
      for (int jj = 0; jj < w; ++jj) {
        key_p8[j0 + jj] = p8[jj];
        key_tile[j0 + jj] = static_cast<int>(release_factor.size()) - 1;
      }
    }
    for (int cc = 0; cc < dv; ++cc) {
      std::int64_t acc = 0;
      for (int jj = 0; jj < w; ++jj) acc += p8[jj] * pr.v.codes[(static_cast<std::size_t>(kh) * p.v.tokens + j0 + jj) * dv + cc];
      o[cc] = release(o[cc], alpha) + acc;
    }
    m = m_new;
  }
  const float sv = pr.v.scales[static_cast<std::size_t>(kh) * p.v.tokens];
  out.o.assign(dv, 0.0f);
  for (int cc = 0; cc < dv; ++cc) {
    std::int64_t code;
    if (vr.division == QFlashVariant::Division::trunc32) {
      // fp32 division truncated toward zero, stored as int8 (0 when l = 0, which the kernel's l = 1 start avoids).
      code = l == 0 ? 0 : qflash::wrap8(static_cast<std::int64_t>(std::trunc(static_cast<float>(o[cc]) / static_cast<float>(l))));
    } else {
      code = qflash::normalize(o[cc], l);
    }
    out.o[cc] = static_cast<float>(code) * sv;
  }
  if (want_weights) {
    // Key j's weight: P8_j times the release factors of every later tile, over the final l.
    std::vector<double> after(release_factor.size() + 1, 1.0);
    for (std::size_t t = release_factor.size(); t-- > 0;) after[t] = after[t + 1] * (t + 1 < release_factor.size() ? release_factor[t + 1] : 1.0);
    out.weights.assign(n, 0.0);
    for (int j = 0; j < n; ++j)
      if (key_tile[j] >= 0 && l != 0) out.weights[j] = static_cast<double>(key_p8[j]) * after[key_tile[j]] / static_cast<double>(l);
  }
}

// I-ViT's Shiftmax over the whole row (see qflash.hpp, namespace ivit), int8 Q, K, V.
void run_row_shiftmax(const Problem& p, const Prepared& pr, int h, int i, bool want_weights, RowOut& out) {
  const int n = p.k.tokens, d = p.q.dim, dv = p.v.dim, kh = h / p.group();
  const float sq = pr.q.scales[(static_cast<std::size_t>(h) * p.q.tokens + i)];
  const float sk = pr.k.scales[static_cast<std::size_t>(kh) * p.k.tokens];
  check_integer_softmax_step(static_cast<double>(sq) * sk * p.scale(), "shiftmax");
  const std::int64_t i0 = ivit::i0(static_cast<double>(sq) * sk * p.scale());
  const std::int16_t* qa = &pr.q.codes[(static_cast<std::size_t>(h) * p.q.tokens + i) * d];
  std::vector<std::int64_t> x(n), e(n);
  std::int64_t mx = std::numeric_limits<std::int64_t>::min();
  for (int j = 0; j < n; ++j) {
    if (!p.visible(i, j)) continue;
    x[j] = int_dot(qa, &pr.k.codes[(static_cast<std::size_t>(kh) * p.k.tokens + j) * d], d);
    mx = std::max(mx, x[j]);
  }
  std::int64_t sum = 0;
  for (int j = 0; j < n; ++j) {
    e[j] = p.visible(i, j) ? ivit::exp(x[j] - mx, i0) : 0;
    sum += e[j];
  }
  const std::int64_t factor = (std::int64_t{1} << ivit::kDivBits) / sum;
  std::vector<std::int64_t> o(dv, 0);
  if (want_weights) out.weights.assign(n, 0.0);
  for (int j = 0; j < n; ++j) {
    const std::int64_t pj = (factor * e[j]) >> (ivit::kDivBits - ivit::kPBits);
    if (want_weights) out.weights[j] = std::ldexp(static_cast<double>(pj), -ivit::kPBits);
    if (pj == 0) continue;
    const std::int16_t* vr = &pr.v.codes[(static_cast<std::size_t>(kh) * p.v.tokens + j) * dv];
    for (int cc = 0; cc < dv; ++cc) o[cc] += pj * vr[cc];
  }
  const float sv = pr.v.scales[static_cast<std::size_t>(kh) * p.v.tokens];
  out.o.assign(dv, 0.0f);
  for (int cc = 0; cc < dv; ++cc) out.o[cc] = static_cast<float>(static_cast<double>(o[cc]) * std::ldexp(1.0, -ivit::kPBits)) * sv;
}

}  // namespace

std::string variant_not_modelled(const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  const bool integer = r.softmax != SoftmaxKind::float_online;
  const std::string softmax = r.softmax == SoftmaxKind::qflash_integer ? "softmax=qflash" : "softmax=shiftmax";
  if (p.softcap > 0 && (integer || r.q_prescale)) {
    return "the problem soft-caps its logits, which recipe " + (integer ? softmax : std::string("qprescale=1")) +
           " does not model; expected the float online softmax with the scale applied to the score";
  }
  if (!p.sinks.empty() && integer) return "the problem has sink logits, which recipe " + softmax + " does not model; expected the float online softmax";
  if (!p.alibi.empty() && (integer || r.q_prescale)) {
    return "the problem adds ALiBi slopes, which recipe " + (integer ? softmax : std::string("qprescale=1")) +
           " does not model; expected the float online softmax with the scale applied to the score";
  }
  if ((p.softcap > 0 || !p.sinks.empty()) && r.exp_form == ExpForm::aten) {
    return std::string("the problem ") + (p.softcap > 0 ? "soft-caps its logits" : "has sink logits") +
           ", which expform=aten (PyTorch's CPU flash attention, which has neither) does not model; expected expform=lab or fa";
  }
  if (!p.alibi.empty() && p.softcap > 0) return "the problem both soft-caps and adds ALiBi slopes, an order no kernel or model fixes; expected one of the two";
  return "";
}

namespace {

}  // namespace

EmulatorResult emulate(const Problem& p, const Recipe& recipe, const EmulatorOptions& opt) {
  validate(p);
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  validate(r);
  if (std::string why = variant_not_modelled(p, r); !why.empty()) throw std::invalid_argument("emulate: " + why);
  for (int i : opt.prob_rows) {
    if (i < 0 || i >= p.q.tokens) throw std::invalid_argument("emulate: probability row " + std::to_string(i) + " is outside [0, " + std::to_string(p.q.tokens) + ")");
  }
  const Prepared pr = prepare_all(p, r);
  const Scorer scorer(p, r, pr);
  EmulatorResult res;
  res.rows = p.rows.resolve(p.q.tokens);
  res.prob_rows = opt.prob_rows;
  const int hq = p.q.heads, dv = p.v.dim, nr = static_cast<int>(res.rows.size()), np = static_cast<int>(res.prob_rows.size());
  res.out = TensorF(hq, nr, dv);  // O has V's head dim
  res.probs = TensorD(hq, np, p.k.tokens);
  // Tasks: blocks of up to Br output rows of one head (they share each K/V tile), and one task per
  // probability row. The integer softmaxes run row by row.
  const int br = r.softmax == SoftmaxKind::float_online ? std::max(1, r.tiles.block_q) : 1;
  const int blocks = (nr + br - 1) / br;
  const long tasks = static_cast<long>(hq) * (blocks + np);
  parallel_tasks(tasks, opt.threads, [&](long t) {
    const int h = static_cast<int>(t / (blocks + np)), k = static_cast<int>(t % (blocks + np));
    const bool weights = k >= blocks;
    const int first = weights ? k - blocks : k * br;
    const int count = weights ? 1 : std::min(br, nr - first);
    const int* rows = weights ? &res.prob_rows[first] : &res.rows[first];
    std::vector<RowOut> outs(count);
    if (r.softmax == SoftmaxKind::qflash_integer) run_row_qflash(p, r, pr, h, rows[0], weights, outs[0]);
    else if (r.softmax == SoftmaxKind::ivit_shiftmax) run_row_shiftmax(p, pr, h, rows[0], weights, outs[0]);
    else run_block(p, r, pr, scorer, h, rows, count, weights, outs);
    for (int q = 0; q < count; ++q) {
      if (weights) std::copy(outs[q].weights.begin(), outs[q].weights.end(), res.probs.row(h, first + q));
      else std::copy(outs[q].o.begin(), outs[q].o.end(), res.out.row(h, first + q));
    }
  });
  if (r.out != FormatId::fp32) {  // the output as the kernel stores it
    const Format f = format_of(r.out);
    for (float& x : res.out.data) x = static_cast<float>(round_to(f, x));
  }
  return res;
}

std::vector<int> integer_logits(const Problem& p, const Recipe& recipe, int h, int i, int j) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  validate(r);
  if (format_of(r.q.spec.format).kind != Kind::integer) throw std::invalid_argument("integer_logits: the recipe's QK^T is not integer");
  const Prepared pr = prepare_all(p, r);
  const int d = p.q.dim, g = pr.q.groups, gs = d / g, kh = h / p.group();
  std::vector<int> out(g);
  for (int gi = 0; gi < g; ++gi) {
    out[gi] = int_dot(&pr.q.codes[(static_cast<std::size_t>(h) * p.q.tokens + i) * d + gi * gs],
                      &pr.k.codes[(static_cast<std::size_t>(kh) * p.k.tokens + j) * d + gi * gs], gs);
  }
  return out;
}

std::vector<int> integer_logit_block(const Problem& p, const Recipe& recipe, int h, int rows, int keys) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  validate(r);
  if (format_of(r.q.spec.format).kind != Kind::integer) throw std::invalid_argument("integer_logit_block: the recipe's QK^T is not integer");
  if (rows < 0 || rows > p.q.tokens || keys < 0 || keys > p.k.tokens) throw std::invalid_argument("integer_logit_block: rows or keys outside [0, N]");
  const Prepared pr = prepare_all(p, r);
  if (pr.q.groups != 1) throw std::invalid_argument("integer_logit_block: the recipe scales Q in groups; use integer_logits");
  const int d = p.q.dim, kh = h / p.group();
  std::vector<int> out(static_cast<std::size_t>(rows) * keys);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < keys; ++j)
      out[static_cast<std::size_t>(i) * keys + j] = int_dot(&pr.q.codes[(static_cast<std::size_t>(h) * p.q.tokens + i) * d],
                                                            &pr.k.codes[(static_cast<std::size_t>(kh) * p.k.tokens + j) * d], d);
  return out;
}

std::vector<float> float_scores(const Problem& p, const Recipe& recipe, int h, int i, int j0, int count) {
  validate(p);
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  validate(r);
  if (format_of(r.q.spec.format).kind == Kind::integer) throw std::invalid_argument("float_scores: the recipe's QK^T is integer");
  if (j0 < 0 || count < 0 || j0 + count > p.k.tokens) throw std::invalid_argument("float_scores: keys outside [0, N)");
  const Prepared pr = prepare_all(p, r);
  const Scorer scorer(p, r, pr);
  const int kh = h / p.group();
  std::vector<float> out(static_cast<std::size_t>(count));
  if (scorer.fp32_tiles()) {
    scorer.score_tile_fp32(h, kh, i, j0, count, out.data());
  } else {
    std::vector<double> terms;
    std::vector<int> exps;
    for (int u = 0; u < count; ++u) out[static_cast<std::size_t>(u)] = scorer.score(h, kh, i, j0 + u, terms, exps);
  }
  return out;
}

}  // namespace qattn
