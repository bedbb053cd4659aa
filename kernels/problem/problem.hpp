#pragma once
// One attention evaluation: Q [Hq, N, d], K/V [Hkv, N, d] (Hq a multiple of Hkv: GQA), masks,
// softmax scale and the query rows to evaluate. Query i and key j sit at positions i and j.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/formats/tensor.hpp"

namespace qattn {

// splitmix64 (Steele, Lea, Flood): the lab's one seeded generator, fixed here so that a seed names
// the same rows and the same synthetic tensors on every platform and library.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Which query rows to evaluate. Rows are independent, so long contexts are evaluated on a sample.
struct RowSelection {
  enum class Kind : std::uint8_t { all, range, sample, list };
  Kind kind = Kind::all;
  int begin = 0, end = 0;   // range: [begin, end)
  int count = 0;            // sample: this many distinct rows
  std::uint64_t seed = 0;   // sample: seed of the generator below
  std::vector<int> listed;  // list: these rows (strictly increasing; an outside kernel's chosen rows)

  static RowSelection all_rows() { return {}; }
  static RowSelection range_of(int b, int e) { return {Kind::range, b, e, 0, 0, {}}; }
  static RowSelection sample_of(int n, std::uint64_t s) { return {Kind::sample, 0, 0, n, s, {}}; }
  static RowSelection list_of(std::vector<int> rows) { return {Kind::list, 0, 0, 0, 0, std::move(rows)}; }

  // Sorted row indices for a context of `tokens` rows. The sample draws with splitmix64 (its
  // constants fixed here, so a seed names the same rows on every platform and library).
  std::vector<int> resolve(int tokens) const;
};

struct Problem {
  TensorF q, k, v;
  bool causal = false;
  int window = 0;             // sliding window: key j is visible to query i when i - window < j (0 = none);
                              // without `causal` the window is two-sided, |i - j| < window
  int chunk = 0;              // chunked local attention (Llama 4): query i sees only keys of its own chunk,
                              // floor(j / chunk) = floor(i / chunk) (0 = none)
  double softmax_scale = 0;   // 0 means 1/sqrt(d)
  // Logit soft-capping (Gemma 2's attn_logit_softcapping): the scaled score s becomes
  // softcap * tanh(s / softcap) before the softmax; 0 = none.
  double softcap = 0;
  // A learned sink logit per query head (gpt-oss): exp(sink - max) joins the softmax's denominator
  // and multiplies no value. Natural-log units, beside the scaled scores; empty = none.
  std::vector<double> sinks;
  // ALiBi (BLOOM, MPT): a slope per query head; -slope * |i - j| joins the scaled score of query i
  // and key j (causal rows: BLOOM's slope * j, up to a row constant the softmax ignores). Empty = none.
  std::vector<double> alibi;
  RowSelection rows;

  int group() const { return q.heads / k.heads; }  // query heads per KV head
  double scale() const;
  // The scaled score of query head h, row i, key j as the softmax sees it (ALiBi's bias added,
  // soft-capped when the problem caps), in float64.
  double logit(double scaled, int h, int i, int j) const {
    if (!alibi.empty()) scaled -= alibi[static_cast<std::size_t>(h)] * std::abs(i - j);
    return softcap > 0 ? softcap * std::tanh(scaled / softcap) : scaled;
  }
  // Keys [lo, hi) that query i can see (one interval).
  std::pair<int, int> visible_keys(int i) const {
    int lo = 0, hi = k.tokens;
    if (causal) hi = i + 1;
    if (window > 0) {
      lo = i - window + 1 > 0 ? i - window + 1 : 0;
      if (!causal) hi = window < k.tokens - i ? i + window : k.tokens;  // i + window may overflow int
    }
    if (chunk > 0) {
      const int start = i - i % chunk;
      lo = std::max(lo, start);
      if (chunk < k.tokens - start) hi = std::min(hi, start + chunk);  // start + chunk may overflow int
    }
    return {lo, hi};
  }
  bool visible(int i, int j) const {
    if (causal && j > i) return false;
    if (window > 0 && (i - j >= window || j - i >= window)) return false;
    if (chunk > 0 && i / chunk != j / chunk) return false;
    return true;
  }
};

// Throws std::invalid_argument with what is wrong, where, and what was expected: empty or
// mismatched shapes, Hq not a multiple of Hkv, NaN/Inf elements, bad rows, bad scale or window.
void validate(const Problem& p);

}  // namespace qattn
