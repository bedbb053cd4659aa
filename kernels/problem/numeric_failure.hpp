#pragma once
// A result that exists but is not a number the lab may report: an output with NaN or Inf elements,
// or an input the recipe's arithmetic cannot represent (an integer softmax's unit out of range).
// Distinct from std::invalid_argument (a bad request, refused before any work): a sweep records
// the unit as failed with this reason and goes on; a NaN is never printed as a result.
#include <stdexcept>
#include <string>

namespace qattn {

struct NumericFailure : std::runtime_error {
  explicit NumericFailure(const std::string& why) : std::runtime_error(why) {}
};

}  // namespace qattn
