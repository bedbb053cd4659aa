// `qattn formats`: the number formats as the lab defines them, one row each, or every code point.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/cli/commands.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/registry.hpp"

namespace qattn::cli {

namespace {

std::string value_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.17g}", v);
}

std::string hex(const Format& f, std::uint32_t code) { return fmt::format("0x{:0{}x}", code, (f.bits + 3) / 4); }

void print_summary(const std::string& only) {
  fmt::print("{:<9} {:>4} {:>14} {:>14} {:>14} {:>12} {:>14}  {}\n", "format", "bits", "max_finite", "min_normal",
             "min_subnormal", "epsilon", "flush_below", "specials");
  for (FormatId id : all_formats()) {
    if (!only.empty() && only != name_of(id)) continue;
    const Format f = format_of(id);
    const char* specials = f.kind == Kind::integer ? "two's complement; quantizers use +-max"
                           : f.specials == Specials::ieee ? "IEEE Inf and NaN, -0"
                           : f.specials == Specials::fn   ? "NaN = S.1111.111, no Inf, -0"
                           : f.specials == Specials::fnuz ? "NaN = 0x80 only, no Inf, no -0"
                           : f.specials == Specials::e8m0 ? "0xFF = NaN, no sign, no zero"
                                                          : "all finite, -0";
    const std::string flush = f.specials == Specials::e8m0 ? std::string("none") : fmt::format("{:.6g}", flush_threshold(f));
    fmt::print("{:<9} {:>4} {:>14.6g} {:>14.6g} {:>14.6g} {:>12.6g} {:>14}  {}\n", name_of(id), f.bits, max_finite(f),
               min_normal(f), min_subnormal(f), epsilon(f), flush, specials);
  }
  fmt::print("flush_below: the largest |x| that encodes to zero (round to nearest even; half the smallest code)\n");
}

void require_small(const Format& f, const char* option) {
  if (f.bits > 16) {
    throw std::invalid_argument(fmt::format("formats {}: a {}-bit format has too many codes; expected a format of "
                                            "16 bits or fewer", option, f.bits));
  }
}

void print_table(const Format& f) {
  require_small(f, "--table");
  fmt::print("code,hex,value\n");
  for (std::uint32_t c = 0; c < (1u << f.bits); ++c) fmt::print("{},{},{}\n", c, hex(f, c), value_text(decode(f, c)));
}

// Every midpoint between two neighbouring finite values and the code it encodes to (the even one
// of the two under round-to-nearest-even). Used by the independent cross-check against ml_dtypes.
void print_midpoints(const Format& f) {
  require_small(f, "--midpoints");
  std::vector<std::pair<double, std::uint32_t>> values;
  for (std::uint32_t c = 0; c < (1u << f.bits); ++c) {
    const double v = decode(f, c);
    if (std::isfinite(v) && !(v == 0 && std::signbit(v))) values.emplace_back(v, c);
  }
  std::sort(values.begin(), values.end());
  fmt::print("lo_code,hi_code,midpoint,code\n");
  for (std::size_t i = 1; i < values.size(); ++i) {
    const double mid = (values[i - 1].first + values[i].first) / 2;  // exact: both are short doubles
    fmt::print("{},{},{},{}\n", values[i - 1].second, values[i].second, value_text(mid), encode(f, mid));
  }
}

}  // namespace

Action add_formats_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "List the number formats, or print one format's code points");
  struct Opts {
    std::string name;
    bool table = false, midpoints = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("name", opts->name, "Format to show (" + format_names() + ")");
  cmd->add_flag("--table", opts->table, "Print every code point as CSV: code,hex,value");
  cmd->add_flag("--midpoints", opts->midpoints,
                "Print every midpoint between neighbouring values and its encoding as CSV");
  return [opts]() {
    if (opts->name.empty()) {
      if (opts->table || opts->midpoints) throw std::invalid_argument("formats: --table and --midpoints need a format NAME");
      print_summary("");
      return 0;
    }
    const Format f = format_of(parse_format(opts->name, "formats NAME"));
    if (opts->midpoints) print_midpoints(f);
    else if (opts->table) print_table(f);
    else print_summary(opts->name);
    return 0;
  };
}

}  // namespace qattn::cli
