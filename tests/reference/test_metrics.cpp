// Error metrics: definitions on hand-computed cases and the defined edge cases.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/formats/numeric_failure.hpp"
#include "reference/metrics.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;

TEST_CASE("metrics on a hand-computed case", "[metrics]") {
  const std::vector<double> ref{3, -4, 0, 0};
  const std::vector<double> x{3, -4, 1, -0.5};  // error (0, 0, 1, -0.5)
  const ErrorMetrics m = compare(ref, x);
  // Closed forms of the same sums; 1e-14 allows a few ulps of rounding in log10 and sqrt.
  CHECK(std::fabs(m.sqnr_db - 10 * std::log10(25.0 / 1.25)) < 1e-14);
  CHECK(std::fabs(m.rel_l2 - std::sqrt(1.25 / 25.0)) < 1e-14);
  CHECK(std::fabs(m.rel_l1 - 1.5 / 7.0) < 1e-14);
  CHECK(std::fabs(m.cosine - 25.0 / std::sqrt(26.25 * 25.0)) < 1e-14);
  CHECK(m.max_abs == 1.0);
  CHECK(m.count == 4);
}

TEST_CASE("identical inputs give +inf SQNR, not NaN", "[metrics]") {
  const std::vector<double> ref{1, 2, 3};
  const ErrorMetrics m = compare(ref, ref);
  CHECK(std::isinf(m.sqnr_db));
  CHECK(m.sqnr_db > 0);
  CHECK(m.rel_l2 == 0);
  CHECK(m.rel_l1 == 0);
  CHECK(m.max_abs == 0);
  CHECK(std::fabs(m.cosine - 1) < 1e-15);  // one division and a square root
}

TEST_CASE("a zero reference and mismatched lengths are errors, not divisions by zero", "[metrics]") {
  const std::vector<double> zero{0, 0}, x{1, 2}, three{1, 2, 3};
  CHECK(error_text([&] { (void)compare(zero, x); }).find("reference output is all zeros") != std::string::npos);
  CHECK(error_text([&] { (void)compare(x, three); }).find("reference has 2 values but the result has 3") !=
        std::string::npos);
  CHECK(error_text([&] { (void)compare(std::vector<double>{}, std::vector<double>{}); }).find("no values") !=
        std::string::npos);
}

TEST_CASE("a NaN or Inf in the result or the reference is a NumericFailure, never a NaN metric", "[metrics]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> ref{1, 2, 3};
  CHECK_THROWS_AS(compare(ref, std::vector<double>{1, nan, 3}), NumericFailure);
  CHECK(error_text([&] { (void)compare(ref, std::vector<double>{1, 2, -inf}); }).find("1 non-finite value(s) of 3 (first: element 2 is Inf)") !=
        std::string::npos);
  CHECK(error_text([&] { (void)compare(std::vector<double>{1, inf, 3}, ref); }).find("the float64 reference has a non-finite value") !=
        std::string::npos);
}

TEST_CASE("KL(P_ref || P) and total variation of probability rows", "[metrics]") {
  const std::vector<double> p_ref{0.5, 0.25, 0.25}, same = p_ref;
  CHECK(row_divergence(p_ref, same).kl == 0.0);
  CHECK(row_divergence(p_ref, same).total_variation == 0.0);
  const std::vector<double> p{0.25, 0.5, 0.25};
  const RowDivergence d = row_divergence(p_ref, p);
  CHECK(std::fabs(d.kl - (0.5 * std::log(2.0) + 0.25 * std::log(0.5))) < 1e-15);  // a few ulps of log
  CHECK(std::fabs(d.total_variation - 0.25) < 1e-16);
  // A flushed entry: KL is capped by the floor instead of becoming infinite.
  const std::vector<double> flushed{0.75, 0.25, 0.0};
  const RowDivergence f = row_divergence(p_ref, flushed, 1e-30);
  const double want = 0.5 * std::log(0.5 / 0.75) + 0.25 * std::log(1.0) + 0.25 * std::log(0.25 / 1e-30);
  CHECK(std::fabs(f.kl - want) < 1e-13);  // ~17 nats summed: a few ulps
  CHECK(std::isfinite(f.kl));
  CHECK(std::fabs(f.total_variation - 0.25) < 1e-16);
  CHECK(error_text([&] { (void)row_divergence(p_ref, std::vector<double>{1.0}); }).find("has 3 entries") !=
        std::string::npos);
}

TEST_CASE("row divergence with a sink: the rows' missing mass is one more outcome", "[metrics][variants]") {
  // The reference leaves 0.5 to the sink, the row compared 0.25: keys 0.25, 0.25 vs 0.375, 0.375.
  const std::vector<double> p_ref{0.25, 0.25}, p{0.375, 0.375};
  const RowDivergence d = row_divergence(p_ref, p, kKlFloor, true);
  // KL = 2 (0.25 ln(0.25 / 0.375)) + 0.5 ln(0.5 / 0.25); TV = (0.125 + 0.125 + 0.25) / 2. float64: ulps.
  CHECK(d.kl == Approx(0.5 * std::log(0.25 / 0.375) + 0.5 * std::log(2.0)).epsilon(1e-14));
  CHECK(d.total_variation == Approx(0.25).epsilon(1e-14));
  // Without the sink's outcome the same rows give a negative "KL": not a divergence.
  CHECK(row_divergence(p_ref, p).kl < 0);
}
