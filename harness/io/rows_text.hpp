#pragma once
// Query rows as text: "all", "range:BEGIN:END" or "sample:COUNT:SEED" (the CLI's --rows and the
// Python package's rows='...').
#include <string>

#include "kernels/problem/problem.hpp"

namespace qattn {

// Throws std::invalid_argument "WHAT: 'TEXT'; expected ..." for anything else.
RowSelection rows_from_string(const std::string& text, const std::string& what);

}  // namespace qattn
