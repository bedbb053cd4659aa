#pragma once
// A result that exists but is not a number the lab may report: an output with NaN or Inf elements,
// or an input the recipe's arithmetic cannot represent (an integer softmax's unit out of range).
// Distinct from std::invalid_argument (a bad request, refused before any work): a sweep records
// the unit as failed with this reason and goes on; a NaN is never printed as a result. A
// domain_error, as the quantizers on host and device have always thrown for unrepresentable scales.
#include <stdexcept>
#include <string>

namespace qattn {

struct NumericFailure : std::domain_error {
  explicit NumericFailure(const std::string& why) : std::domain_error(why) {}
};

}  // namespace qattn
