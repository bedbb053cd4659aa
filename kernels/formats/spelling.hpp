#pragma once
// "Did you mean" for a mistyped name (a format, a recipe key, a granularity, a command): the floor
// every layer that reads a user's words can include.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace qattn {

// Levenshtein distance, for "did you mean" (names are a few characters).
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "; did you mean 'x'?" for the first known name within two edits of a mistyped one (a typo, not
// another word: most names here are 3-12 characters), else "".
template <typename Names>
std::string did_you_mean(const std::string& typed, const Names& known) {
  for (const auto& name : known) {
    const std::string n(name);
    if (n != typed && edit_distance(typed, n) <= 2) return "; did you mean '" + n + "'?";
  }
  return "";
}

}  // namespace qattn
