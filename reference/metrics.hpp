#pragma once
// Error metrics of a result x against a reference, all computed in float64.
//   SQNR dB       = 10 log10(sum ref^2 / sum (x - ref)^2)    (+inf when x == ref)
//   relative L2   = ||x - ref||_2 / ||ref||_2
//   relative L1   = sum |x - ref| / sum |ref|                (SageAttention's "L1")
//   cosine        = <x, ref> / (||x|| ||ref||)               (0 when x is all zeros)
//   max abs error = max |x - ref|
// A reference that is all zeros leaves the relative metrics undefined: that is an error, never a
// division by zero. NaN in x propagates into the metrics (a broken kernel must show as NaN).
#include <array>
#include <cstddef>
#include <span>

namespace qattn {

struct ErrorMetrics {
  double sqnr_db = 0;
  double rel_l2 = 0;
  double rel_l1 = 0;
  double cosine = 0;
  double max_abs = 0;
  std::size_t count = 0;
};

// The error metrics by name, in the order every report lists them (harness/experiment/unit_score
// writes each unit's fields from this table): a new metric is a field above, its computation in
// compare(), and a row here.
struct ErrorField {
  const char* name;
  double ErrorMetrics::*value;
};
inline constexpr std::array<ErrorField, 5> kErrorFields{{{"sqnr_db", &ErrorMetrics::sqnr_db},
                                                        {"rel_l2", &ErrorMetrics::rel_l2},
                                                        {"rel_l1", &ErrorMetrics::rel_l1},
                                                        {"cosine", &ErrorMetrics::cosine},
                                                        {"max_abs", &ErrorMetrics::max_abs}}};

// Throws std::invalid_argument if the lengths differ, are zero, or ref is all zeros; NumericFailure
// (kernels/formats/numeric_failure.hpp) if x or ref holds a NaN or Inf, so no metric is ever NaN.
ErrorMetrics compare(std::span<const double> ref, std::span<const double> x);

// Row-wise divergence of a probability row p from the reference row p_ref.
//   KL(p_ref || p) = sum_j p_ref_j * ln(p_ref_j / max(p_j, floor))   (nats)
// KL is infinite as soon as p flushes an entry p_ref keeps; the floor caps each such entry's term at
// p_ref_j * ln(p_ref_j / floor). kKlFloor = 1e-30 sits below every format's smallest nonzero P
// (fp32's 1.4e-45 aside), so it only bites on entries that were flushed to exactly zero.
// Total variation = 0.5 * sum |p_ref_j - p_j|: the probability mass moved.
// With sink_outcome (a problem with sink logits), the mass each row leaves to its sink, 1 - sum, is
// one more outcome of both distributions, so that KL and TV compare two distributions that sum to 1.
inline constexpr double kKlFloor = 1e-30;
struct RowDivergence {
  double kl = 0;
  double total_variation = 0;
};
RowDivergence row_divergence(std::span<const double> p_ref, std::span<const double> p, double floor = kKlFloor, bool sink_outcome = false);

}  // namespace qattn
