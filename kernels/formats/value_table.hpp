#pragma once
// A host fast path for rounding non-negative values to a format (P after the running max is
// >= 0): binary search over the format's non-negative values, ties to the even code. Bit-equal to
// decode(encode(f, y)) for every y >= 0 (tested on every midpoint and its neighbours), saturating
// at max finite.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/formats/codec.hpp"

namespace qattn {

class NonNegativeRounder {
 public:
  explicit NonNegativeRounder(const Format& f) {
    for (std::uint32_t c = 0; c <= max_finite_magnitude_code(f); ++c) {
      const double v = decode(f, c);
      if (v >= 0 && (values_.empty() || v > values_.back())) {
        values_.push_back(v);
        even_.push_back((c & 1u) == 0);
      }
    }
    for (std::size_t i = 1; i < values_.size(); ++i) mids_.push_back((values_[i - 1] + values_[i]) / 2);
  }

  // Only for formats of 16 bits or fewer (the table holds every value).
  double round(double y) const {
    const auto it = std::lower_bound(mids_.begin(), mids_.end(), y);  // first midpoint >= y
    std::size_t i = static_cast<std::size_t>(it - mids_.begin());     // y lies below mids_[i]
    if (it != mids_.end() && *it == y && !even_[i]) ++i;               // a tie goes to the even code
    return values_[i];
  }

 private:
  std::vector<double> values_, mids_;
  std::vector<bool> even_;
};

}  // namespace qattn
