#pragma once
// Stored error bounds for an experiment's recipes, and the check that recomputes and compares.
#include <string>

namespace qattn {

// Recomputes the experiment named in BOUNDS (into a temporary folder) and compares, per recipe,
// layer and context, the mean over heads of SQNR (must not fall below its bound) and of KL (must
// not rise above its bound). Prints every violation with its size; returns the number of them.
// With update = true, rewrites BOUNDS from this run instead (a deliberate change).
int check_bounds(const std::string& bounds_file, bool update, bool quiet = false);

}  // namespace qattn
