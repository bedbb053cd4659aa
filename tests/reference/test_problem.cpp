// Bad problems: one clear error each, naming what, where and what was expected.
#include <limits>
#include <cmath>

#include "reference/attention.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;
using qattn::test::random_problem;

namespace {
std::string problem_error(const Problem& p) {
  return error_text([&] { (void)reference_attention(p); });
}
}  // namespace

TEST_CASE("Hq not a multiple of Hkv is rejected", "[reference][errors]") {
  const Problem p = random_problem(5, 2, 8, 4, 1);
  const std::string msg = problem_error(p);
  CHECK(msg.find("Hq = 5 is not a multiple of Hkv = 2") != std::string::npos);
  CHECK(msg.find("q [5, 8, 4]") != std::string::npos);
}

TEST_CASE("mismatched shapes are rejected", "[reference][errors]") {
  Problem p = random_problem(2, 1, 8, 4, 1);
  p.v = qattn::test::random_tensor(1, 7, 4, 3);
  CHECK(problem_error(p).find("k and v head or token counts differ") != std::string::npos);
  p.v = qattn::test::random_tensor(2, 8, 4, 3);
  CHECK(problem_error(p).find("k and v head or token counts differ") != std::string::npos);
  p.v = qattn::test::random_tensor(1, 8, 5, 3);  // V's head dim may differ (multi-head latent attention)
  CHECK(problem_error(p).empty());
  p = random_problem(2, 1, 8, 4, 1);
  p.q = qattn::test::random_tensor(2, 8, 6, 3);
  CHECK(problem_error(p).find("q and k head dims differ") != std::string::npos);
  p = random_problem(2, 1, 8, 4, 1);
  p.q = qattn::test::random_tensor(2, 9, 4, 3);
  CHECK(problem_error(p).find("q and k token counts differ") != std::string::npos);
  p = random_problem(2, 1, 8, 4, 1);
  p.k.data.pop_back();
  CHECK(problem_error(p).find("tensor data size does not match its shape") != std::string::npos);
}

TEST_CASE("NaN or Inf inputs are rejected with their position", "[reference][errors]") {
  Problem p = random_problem(2, 1, 8, 4, 1);
  p.k(0, 5, 3) = std::nanf("");
  CHECK(problem_error(p).find("k[head 0, token 5, channel 3] is NaN; expected finite values") != std::string::npos);
  p = random_problem(2, 1, 8, 4, 1);
  p.v(0, 7, 0) = INFINITY;
  CHECK(problem_error(p).find("v[head 0, token 7, channel 0] is Inf") != std::string::npos);
}

TEST_CASE("the largest sliding window keeps every key visible without overflowing", "[reference]") {
  // i + window overflowed int for window = INT_MAX (found by UBSan); the range must be all keys.
  Problem p;
  p.k = TensorF(1, 10, 4);
  p.window = std::numeric_limits<int>::max();
  for (const int i : {0, 5, 9}) {
    CHECK(p.visible_keys(i) == std::pair<int, int>{0, 10});
    CHECK(p.visible(i, 0));
    CHECK(p.visible(i, 9));
  }
  p.causal = true;
  CHECK(p.visible_keys(5) == std::pair<int, int>{0, 6});
}

TEST_CASE("bad rows, windows and scales are rejected", "[reference][errors]") {
  Problem p = random_problem(1, 1, 8, 4, 1);
  p.rows = RowSelection::range_of(4, 20);
  CHECK(problem_error(p).find("range [4, 20) is empty or outside [0, 8)") != std::string::npos);
  p.rows = RowSelection::sample_of(9, 1);
  CHECK(problem_error(p).find("sample of 9 rows from 8 tokens") != std::string::npos);
  p.rows = RowSelection::all_rows();
  p.window = -1;
  CHECK(problem_error(p).find("window=-1 is negative") != std::string::npos);
  p.window = 0;
  p.softmax_scale = NAN;
  CHECK(problem_error(p).find("softmax_scale") != std::string::npos);
  p.softmax_scale = 0;
  ReferenceOptions opt;
  opt.prob_rows = {8};
  CHECK(error_text([&] { (void)reference_attention(p, opt); }).find("probability row 8 is outside [0, 8)") !=
        std::string::npos);
}

TEST_CASE("bad soft-caps, sink logits and chunks are rejected", "[reference][errors][variants]") {
  Problem p = random_problem(2, 1, 8, 4, 1);
  p.softcap = -1;
  CHECK(problem_error(p).find("softcap -1.000000 must be finite and >= 0 (0 = none)") != std::string::npos);
  p.softcap = NAN;
  CHECK(problem_error(p).find("softcap") != std::string::npos);
  p.softcap = 0;
  p.sinks = {1.0};
  CHECK(problem_error(p).find("sinks has 1 values; expected one per query head (2) or none") != std::string::npos);
  p.sinks = {1.0, INFINITY};
  CHECK(problem_error(p).find("sinks[1] is not finite") != std::string::npos);
  p.sinks = {1.0, -2.0};
  CHECK(problem_error(p).empty());
  p.alibi = {0.5};
  CHECK(problem_error(p).find("alibi has 1 values; expected one per query head (2) or none") != std::string::npos);
  p.alibi.clear();
  p.chunk = -2;
  CHECK(problem_error(p).find("chunk=-2 is negative; expected 0 (none) or a positive token count") != std::string::npos);
}
