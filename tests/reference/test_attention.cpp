// The float64 reference against an independent long-double attention, and the identities the lab
// relies on (key permutation, K shift, GQA, masks).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/attention.hpp"
#include "tests/catch.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;
using qattn::test::random_problem;

namespace {

double max_diff(const TensorD& a, const TensorD& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a.data[i] - b.data[i]));
  return m;
}

double max_diff_to_naive(const Problem& p, const ReferenceResult& r) {
  double m = 0;
  for (int h = 0; h < p.q.heads; ++h)
    for (std::size_t ri = 0; ri < r.rows.size(); ++ri) {
      const auto want = qattn::test::naive_attention(p, h, r.rows[ri]);
      for (int c = 0; c < p.v.dim; ++c)
        m = std::max(m, static_cast<double>(std::fabs(want[c] - r.out(h, static_cast<int>(ri), c))));
    }
  return m;
}

}  // namespace

TEST_CASE("reference agrees with a naive two-pass long-double attention", "[reference]") {
  struct Case {
    const char* name;
    bool causal;
    int window;
    RowSelection rows;
  };
  const Case cases[] = {
      {"full", false, 0, RowSelection::all_rows()},
      {"causal", true, 0, RowSelection::all_rows()},
      {"causal window 9", true, 9, RowSelection::all_rows()},
      {"two-sided window 5", false, 5, RowSelection::all_rows()},
      {"causal, row range", true, 0, RowSelection::range_of(40, 77)},
      {"causal window 16, sampled rows", true, 16, RowSelection::sample_of(23, 99)},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Problem p = random_problem(4, 2, 83, 16, 5);
    p.causal = c.causal;
    p.window = c.window;
    p.rows = c.rows;
    ReferenceOptions opt;
    opt.block_q = 16;  // several query and key blocks, ragged at the end
    opt.block_k = 24;
    const ReferenceResult r = reference_attention(p, opt);
    // float64 rounding over <= 83 keys of O(1) terms is ~1e-15; 1e-12 leaves 1000x headroom and
    // is still ten orders of magnitude below what a masking or indexing mistake produces.
    CHECK(max_diff_to_naive(p, r) < 1e-12);
  }
}

TEST_CASE("block sizes do not change the reference beyond float64 rounding", "[reference]") {
  Problem p = random_problem(2, 1, 300, 32, 8);
  p.causal = true;
  p.window = 100;
  ReferenceOptions a, b;
  a.block_q = 7;
  a.block_k = 13;
  b.block_q = 256;
  b.block_k = 512;
  // Different summation orders of the same float64 terms differ by a few ulps of O(1) outputs.
  CHECK(max_diff(reference_attention(p, a).out, reference_attention(p, b).out) < 1e-13);
}

TEST_CASE("permuting keys and values together leaves a non-causal output unchanged", "[reference]") {
  Problem p = random_problem(2, 2, 97, 16, 21);
  Problem q = p;
  std::vector<int> perm(97);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 gen(3);
  std::shuffle(perm.begin(), perm.end(), gen);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 97; ++j)
      for (int c = 0; c < 16; ++c) {
        q.k(h, j, c) = p.k(h, perm[j], c);
        q.v(h, j, c) = p.v(h, perm[j], c);
      }
  // Only the summation order changes: float64 rounding of O(1) outputs.
  CHECK(max_diff(reference_attention(p).out, reference_attention(q).out) < 1e-13);
}

TEST_CASE("adding one vector to every key leaves the output unchanged (K smoothing's identity)", "[reference]") {
  Problem p;
  p.q = qattn::test::dyadic_tensor(2, 64, 16, 1);
  p.k = qattn::test::dyadic_tensor(1, 64, 16, 2);
  p.v = qattn::test::dyadic_tensor(1, 64, 16, 3);
  p.causal = true;
  Problem shifted = p;
  for (int j = 0; j < 64; ++j)
    for (int c = 0; c < 16; ++c) shifted.k(0, j, c) += static_cast<float>((c % 7) - 3) * 2.0f;  // exact in fp32
  // Scores shift by q.mu (up to ~200 here), which perturbs each score's float64 rounding by
  // ~200 * 2^-52 = 4e-14; through the softmax that moves outputs by about as much.
  CHECK(max_diff(reference_attention(p).out, reference_attention(shifted).out) < 1e-12);
  // Without the softmax's invariance, the same shift changes the output at O(1): the check has teeth.
  Problem moved_v = p;
  for (float& x : moved_v.v.data) x += 0.5f;
  CHECK(max_diff(reference_attention(p).out, reference_attention(moved_v).out) > 0.4);
}

TEST_CASE("GQA equals repeating each KV head for its query heads", "[reference]") {
  Problem gqa = random_problem(6, 2, 70, 8, 31);
  gqa.causal = true;
  Problem mha = gqa;
  mha.k = TensorF(6, 70, 8);
  mha.v = TensorF(6, 70, 8);
  for (int h = 0; h < 6; ++h)
    for (int j = 0; j < 70; ++j)
      for (int c = 0; c < 8; ++c) {
        mha.k(h, j, c) = gqa.k(h / 3, j, c);
        mha.v(h, j, c) = gqa.v(h / 3, j, c);
      }
  // The same float64 operations in the same order: bit-identical.
  CHECK(max_diff(reference_attention(gqa).out, reference_attention(mha).out) == 0.0);
}

TEST_CASE("probability rows: normalized, masked to exact zeros, and they reproduce the output", "[reference]") {
  Problem p = random_problem(2, 1, 60, 8, 44);
  p.causal = true;
  p.window = 20;
  ReferenceOptions opt;
  opt.prob_rows = {0, 19, 20, 59};
  const ReferenceResult r = reference_attention(p, opt);
  for (int h = 0; h < 2; ++h)
    for (std::size_t k = 0; k < opt.prob_rows.size(); ++k) {
      const int i = opt.prob_rows[k];
      const double* row = r.probs.row(h, static_cast<int>(k));
      double sum = 0;
      for (int j = 0; j < 60; ++j) {
        if (j > i || i - j >= 20) REQUIRE(row[j] == 0.0);
        sum += row[j];
      }
      CHECK(std::fabs(sum - 1.0) < 1e-14);  // 60 terms summed in float64
      for (int c = 0; c < 8; ++c) {
        double o = 0;
        for (int j = 0; j < 60; ++j) o += row[j] * p.v(0, j, c);
        CHECK(std::fabs(o - r.out(h, i, c)) < 1e-13);  // two float64 evaluations of one convex sum
      }
    }
}

TEST_CASE("a seeded row sample is deterministic, distinct and sorted", "[reference]") {
  const auto a = RowSelection::sample_of(100, 42).resolve(5000);
  const auto b = RowSelection::sample_of(100, 42).resolve(5000);
  const auto c = RowSelection::sample_of(100, 43).resolve(5000);
  CHECK(a == b);
  CHECK(a != c);
  REQUIRE(a.size() == 100);
  CHECK(std::is_sorted(a.begin(), a.end()));
  CHECK(std::adjacent_find(a.begin(), a.end()) == a.end());
  CHECK(a.front() >= 0);
  CHECK(a.back() < 5000);
  CHECK(RowSelection::sample_of(10, 1).resolve(10) == RowSelection::all_rows().resolve(10));
}

TEST_CASE("soft-capping and sink logits: hand-worked rows and the naive attention", "[reference][variants]") {
  // q = 0: every score is 0, so two keys weigh 1 each; a sink of ln 2 weighs 2 and takes half the
  // mass: (1 * 1 + 1 * 3) / (1 + 1 + 2) = 1, where plain attention gives (1 + 3) / 2 = 2.
  Problem p;
  p.q = TensorF(1, 2, 1);
  p.k = TensorF(1, 2, 1);
  p.v = TensorF(1, 2, 1);
  p.k.data = {0.5f, -2.0f};
  p.v.data = {1.0f, 3.0f};
  p.softmax_scale = 1.0;
  p.rows = RowSelection::range_of(1, 2);
  CHECK(reference_attention(p).out.data[0] == Approx(2.0).epsilon(1e-15));  // float64 exp/div of exact inputs: a few ulps
  p.sinks = {std::log(2.0)};
  ReferenceOptions opt;
  opt.prob_rows = {1};
  const ReferenceResult sunk = reference_attention(p, opt);
  CHECK(sunk.out.data[0] == Approx(1.0).epsilon(1e-15));  // as above
  CHECK(sunk.probs.data[0] == Approx(0.25).epsilon(1e-15));  // the sink's half is no key's
  CHECK(sunk.probs.data[1] == Approx(0.25).epsilon(1e-15));

  // q = 1, keys 2 and 0, cap 1: scores tanh(2) and 0, so the first value's weight is
  // sigmoid(tanh 2) = 0.72392... where the uncapped sigmoid(2) is 0.88079...
  p.sinks.clear();
  p.q.data = {1.0f, 1.0f};
  p.k.data = {2.0f, 0.0f};
  p.v.data = {1.0f, 0.0f};
  p.softcap = 1.0;
  CHECK(reference_attention(p).out.data[0] == Approx(0.7239274686640463).epsilon(1e-14));  // float64 tanh, exp: ulps
  p.softcap = 0;
  CHECK(reference_attention(p).out.data[0] == Approx(0.8807970779778823).epsilon(1e-14));

  // Random heads with scores well past the cap (sigma 3 inputs, d 16: |s| up to ~40 against cap 5),
  // GQA, causal and windowed, one sink per head.
  for (const bool causal : {false, true}) {
    Problem r = random_problem(4, 2, 70, 16, 21);
    for (float& x : r.q.data) x *= 3.0f;
    r.causal = causal;
    r.window = causal ? 0 : 33;
    r.softcap = 5.0;
    r.sinks = {-1.0, 0.5, 2.5, 8.0};
    ReferenceOptions o;
    o.block_q = 16;
    o.block_k = 24;
    // long double two-pass vs float64 online softmax: ~1e-15 relative per step over <= 70 keys.
    CHECK(max_diff_to_naive(r, reference_attention(r, o)) < 1e-12);
  }
}

TEST_CASE("chunked attention: a query sees its own chunk's keys only", "[reference][variants]") {
  // Chunks of 2 over 4 tokens, q = 0 (equal weights): query 3 averages values 3 and 4 of keys 2 and 3
  // (3.5) where causal attention averages all four (2.5); non-causal, query 2 does the same.
  Problem p;
  p.q = TensorF(1, 4, 1);
  p.k = TensorF(1, 4, 1);
  p.v = TensorF(1, 4, 1);
  p.k.data = {0.5f, -1.0f, 2.0f, 0.25f};
  p.v.data = {1.0f, 2.0f, 3.0f, 4.0f};
  p.causal = true;
  p.rows = RowSelection::range_of(2, 4);
  CHECK(reference_attention(p).out.data[1] == Approx(2.5).epsilon(1e-15));  // float64 mean of four: ulps
  p.chunk = 2;
  const ReferenceResult r = reference_attention(p);
  CHECK(r.out.data[0] == 3.0);  // query 2 is its chunk's first: key 2 alone, exactly
  CHECK(r.out.data[1] == Approx(3.5).epsilon(1e-15));
  p.causal = false;
  CHECK(reference_attention(p).out.data[0] == Approx(3.5).epsilon(1e-15));
  CHECK(p.visible_keys(2) == std::pair<int, int>{2, 4});
  // Random heads: chunks with and without causality, with a window inside the chunks, GQA.
  for (const bool causal : {false, true}) {
    Problem q = random_problem(4, 2, 70, 16, 31);
    q.causal = causal;
    q.chunk = 24;  // 70 tokens: chunks of 24, 24 and 22
    q.window = causal ? 10 : 0;
    ReferenceOptions o;
    o.block_q = 16;
    o.block_k = 8;
    CHECK(max_diff_to_naive(q, reference_attention(q, o)) < 1e-12);  // as the case above
  }
}

TEST_CASE("a value head dim unlike Q/K's (multi-head latent attention): O has V's", "[reference][variants]") {
  // d 24 for Q and K, 16 for V, GQA, causal and not: against the naive attention, whose output is V's.
  for (const bool causal : {false, true}) {
    Problem p = random_problem(4, 2, 60, 24, 41);
    p.v = qattn::test::random_tensor(2, 60, 16, 44);
    p.causal = causal;
    const ReferenceResult r = reference_attention(p);
    CHECK(r.out.dim == 16);
    CHECK(max_diff_to_naive(p, r) < 1e-12);  // as the plain case
  }
}

TEST_CASE("ALiBi: -slope |i - j| on the scaled score", "[reference][variants]") {
  // q = 0, slope ln 2: query 2 weighs keys 0, 1, 2 by 1/4, 1/2, 1, so values 1, 2, 3 give
  // (0.25 + 1 + 3) / 1.75 = 17 / 7.
  Problem p;
  p.q = TensorF(1, 3, 1);
  p.k = TensorF(1, 3, 1);
  p.v = TensorF(1, 3, 1);
  p.k.data = {0.5f, -1.0f, 2.0f};
  p.v.data = {1.0f, 2.0f, 3.0f};
  p.causal = true;
  p.softmax_scale = 1.0;
  p.rows = RowSelection::range_of(2, 3);
  p.alibi = {std::log(2.0)};
  CHECK(reference_attention(p).out.data[0] == Approx(17.0 / 7.0).epsilon(1e-15));  // float64 exp/div: ulps
  for (const bool causal : {false, true}) {
    Problem r = random_problem(4, 2, 70, 16, 51);
    r.causal = causal;
    r.alibi = {0.5, 0.25, 0.125, 0.0625};  // a geometric series, as ALiBi's slopes are
    ReferenceOptions o;
    o.block_q = 16;
    o.block_k = 24;
    CHECK(max_diff_to_naive(r, reference_attention(r, o)) < 1e-12);  // as the cases above
  }
}
