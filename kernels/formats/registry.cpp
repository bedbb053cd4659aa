#include "kernels/formats/registry.hpp"

#include <stdexcept>

namespace qattn {

FormatId parse_format(std::string_view name, std::string_view what) {
  for (int i = 0; i < kFormatCount; ++i) {
    if (name == kFormatNames[i]) return static_cast<FormatId>(i);
  }
  std::string known;
  for (int i = 0; i < kFormatCount; ++i) known += (i ? ", " : "") + std::string(kFormatNames[i]);
  throw std::invalid_argument(std::string(what) + ": unknown format '" + std::string(name) +
                              "'; expected one of: " + known);
}

std::array<FormatId, kFormatCount> all_formats() {
  std::array<FormatId, kFormatCount> ids{};
  for (int i = 0; i < kFormatCount; ++i) ids[i] = static_cast<FormatId>(i);
  return ids;
}

std::string format_names() {
  std::string s;
  for (const char* n : kFormatNames) s += (s.empty() ? "" : " ") + std::string(n);
  return s;
}

}  // namespace qattn
