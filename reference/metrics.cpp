#include "reference/metrics.hpp"

#include "kernels/formats/numeric_failure.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace qattn {

ErrorMetrics compare(std::span<const double> ref, std::span<const double> x) {
  if (ref.size() != x.size()) {
    throw std::invalid_argument("metrics: reference has " + std::to_string(ref.size()) + " values but the result has " +
                                std::to_string(x.size()) + "; expected equal lengths");
  }
  if (ref.empty()) throw std::invalid_argument("metrics: no values to compare");
  std::size_t bad = 0, first = 0;
  for (std::size_t i = x.size(); i-- > 0;)
    if (!std::isfinite(x[i])) ++bad, first = i;
  if (bad) {
    throw NumericFailure("the result has " + std::to_string(bad) + " non-finite value(s) of " + std::to_string(x.size()) +
                         " (first: element " + std::to_string(first) + " is " + (std::isnan(x[first]) ? "NaN" : "Inf") + ")");
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) throw NumericFailure("the float64 reference has a non-finite value (element " + std::to_string(i) + "): the input overflows it");
  }
  // Squares overflow float64 beyond 1e154: every sum is taken over values scaled by one power of two
  // (exact), which leaves every ratio below unchanged; max_abs is scaled back.
  double big = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) big = std::max({big, std::fabs(ref[i]), std::fabs(x[i])});
  const int shift = big > 0 ? std::ilogb(big) : 0;
  double sig = 0, err2 = 0, err1 = 0, abs_ref = 0, dot = 0, xx = 0, max_abs = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = std::ldexp(ref[i], -shift), y = std::ldexp(x[i], -shift), e = y - r;
    sig += r * r;
    err2 += e * e;
    err1 += std::fabs(e);
    abs_ref += std::fabs(r);
    dot += y * r;
    xx += y * y;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  max_abs = std::ldexp(max_abs, shift);
  if (sig == 0) {
    throw NumericFailure("the float64 reference output is all zeros (V is zero where P has mass); SQNR and relative errors are undefined");
  }
  ErrorMetrics m;
  m.count = ref.size();
  m.sqnr_db = err2 == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(sig / err2);
  m.rel_l2 = std::sqrt(err2 / sig);
  m.rel_l1 = err1 / abs_ref;
  m.cosine = xx == 0 ? 0.0 : dot / std::sqrt(xx * sig);
  m.max_abs = max_abs;
  return m;
}

RowDivergence row_divergence(std::span<const double> p_ref, std::span<const double> p, double floor, bool sink_outcome) {
  if (p_ref.size() != p.size()) {
    throw std::invalid_argument("metrics: reference probability row has " + std::to_string(p_ref.size()) +
                                " entries but the row compared has " + std::to_string(p.size()));
  }
  if (!(floor > 0 && floor <= 1)) throw std::invalid_argument("metrics: KL floor " + std::to_string(floor) + "; expected a probability in (0, 1]");
  RowDivergence r;
  double tv = 0;
  for (std::size_t j = 0; j < p.size(); ++j) {
    tv += std::fabs(p_ref[j] - p[j]);
    if (p_ref[j] > 0) r.kl += p_ref[j] * (std::log(p_ref[j]) - std::log(std::max(p[j], floor)));
  }
  if (sink_outcome) {
    double ref_sum = 0, sum = 0;
    for (std::size_t j = 0; j < p.size(); ++j) ref_sum += p_ref[j], sum += p[j];
    const double ref_sink = std::max(0.0, 1.0 - ref_sum), sink = std::max(0.0, 1.0 - sum);
    tv += std::fabs(ref_sink - sink);
    if (ref_sink > 0) r.kl += ref_sink * (std::log(ref_sink) - std::log(std::max(sink, floor)));
  }
  r.total_variation = 0.5 * tv;
  return r;
}

}  // namespace qattn
