#pragma once
// The recipe-level aggregate, defined once. A report's rows hold one SQNR per head (and layer and
// context); a recipe's figure (the summary's, the bounds' and `qattn eval`'s) is the mean of those
// dB values over the group asked for, with the worst beside it. A head bit-equal to what it is
// compared with has an infinite SQNR: the mean over every head is then infinite (a recipe exact
// everywhere reads "inf"), while mean_finite() leaves those heads out and counts them apart, so one
// bit-equal head does not hide the error of the others (the bounds' kernel-vs-recipe figure).
// The other figure a unit has, the pooled SQNR (every head's output as one vector), is
// score_unit's (unit_score.hpp); fit pools the same way over units.
#include <cmath>

namespace qattn {

class DbMean {
 public:
  void add(double db) {
    sum_ += db;
    ++n_;
    worst_ = std::fmin(worst_, db);
    if (std::isinf(db) && db > 0) {
      ++exact_;
    } else {
      finite_sum_ += db;
      ++finite_n_;
    }
  }
  int count() const { return n_; }
  // Over every value added (in the order added, so the sum is reproducible); NaN when none was.
  double mean() const { return n_ > 0 ? sum_ / n_ : NAN; }
  double worst() const { return worst_; }
  // Over the values that are not +inf, and how many were.
  int finite_count() const { return finite_n_; }
  int exact_count() const { return exact_; }
  double mean_finite() const { return finite_n_ > 0 ? finite_sum_ / finite_n_ : NAN; }

 private:
  double sum_ = 0, finite_sum_ = 0, worst_ = INFINITY;
  int n_ = 0, finite_n_ = 0, exact_ = 0;
};

}  // namespace qattn
