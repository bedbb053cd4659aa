#include "harness/io/rows_text.hpp"

#include <sstream>
#include <stdexcept>
#include <vector>

namespace qattn {

RowSelection rows_from_string(const std::string& text, const std::string& what) {
  if (text == "all") return RowSelection::all_rows();
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  try {
    if (parts.size() == 3 && parts[0] == "range") return RowSelection::range_of(std::stoi(parts[1]), std::stoi(parts[2]));
    if (parts.size() == 3 && parts[0] == "sample") return RowSelection::sample_of(std::stoi(parts[1]), std::stoull(parts[2]));
  } catch (const std::logic_error&) {
  }
  throw std::invalid_argument(what + ": '" + text + "'; expected all, range:BEGIN:END or sample:COUNT:SEED");
}

}  // namespace qattn
