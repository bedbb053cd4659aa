#pragma once
// One attention evaluation: Q [Hq, N, d], K/V [Hkv, N, d] (Hq a multiple of Hkv: GQA), masks,
// softmax scale and the query rows to evaluate. Query i and key j sit at positions i and j.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/tensor.hpp"

namespace qattn {

// Which query rows to evaluate. Rows are independent, so long contexts are evaluated on a sample.
struct RowSelection {
  enum class Kind : std::uint8_t { all, range, sample };
  Kind kind = Kind::all;
  int begin = 0, end = 0;   // range: [begin, end)
  int count = 0;            // sample: this many distinct rows
  std::uint64_t seed = 0;   // sample: seed of the generator below

  static RowSelection all_rows() { return {}; }
  static RowSelection range_of(int b, int e) { return {Kind::range, b, e, 0, 0}; }
  static RowSelection sample_of(int n, std::uint64_t s) { return {Kind::sample, 0, 0, n, s}; }

  // Sorted row indices for a context of `tokens` rows. The sample draws with splitmix64 (its
  // constants fixed here, so a seed names the same rows on every platform and library).
  std::vector<int> resolve(int tokens) const;
};

struct Problem {
  TensorF q, k, v;
  bool causal = false;
  int window = 0;             // sliding window: key j is visible to query i when i - window < j (0 = none);
                              // without `causal` the window is two-sided, |i - j| < window
  double softmax_scale = 0;   // 0 means 1/sqrt(d)
  RowSelection rows;

  int group() const { return q.heads / k.heads; }  // query heads per KV head
  double scale() const;
  bool visible(int i, int j) const {
    if (causal && j > i) return false;
    if (window > 0 && (i - j >= window || j - i >= window)) return false;
    return true;
  }
};

// Throws std::invalid_argument with what is wrong, where, and what was expected: empty or
// mismatched shapes, Hq not a multiple of Hkv, NaN/Inf elements, bad rows, bad scale or window.
void validate(const Problem& p);

}  // namespace qattn
