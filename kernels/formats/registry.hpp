#pragma once
// Format names <-> ids for the host side (CLI, recipes, reports).
#include <array>
#include <string>
#include <string_view>

#include "kernels/formats/format.hpp"

namespace qattn {

// Throws std::invalid_argument naming `what` (e.g. "recipe field 'p.format'"), the unknown name
// and every accepted one.
FormatId parse_format(std::string_view name, std::string_view what = "format");

std::array<FormatId, kFormatCount> all_formats();
// Every format's name, space-separated, in FormatId order (for help texts).
std::string format_names();


}  // namespace qattn
