#pragma once
#include <algorithm>
#include <string>
#include <vector>
// Each subcommand registers its options on the app and returns the action to run when chosen.
#include <CLI/CLI.hpp>

#include "harness/io/text.hpp"
#include <functional>

namespace qattn::cli {

using Action = std::function<int()>;

Action add_formats_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_inspect_command(CLI::App& app);
Action add_synth_command(CLI::App& app);
Action add_eval_command(CLI::App& app);
Action add_run_command(CLI::App& app);
Action add_check_command(CLI::App& app);
Action add_plot_command(CLI::App& app);
Action add_score_command(CLI::App& app);
Action add_fit_command(CLI::App& app);
Action add_presets_command(CLI::App& app);


// A seed: an unsigned 64-bit integer, checked as text before CLI11 converts it (which would wrap -1
// to 2^64-1 and print a double's range when refusing).
inline const CLI::Validator kSeed(
    [](std::string& s) -> std::string {
      const bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
      if (digits && (s.size() < 20 || s <= "18446744073709551615")) return "";
      return s + ": expected an integer in 0..2^64-1";
    },
    "SEED");

// A path for an error message: at most 80 bytes, cut on a UTF-8 character boundary.
inline std::string brief_path(const std::string& p) {
  if (p.size() <= 80) return p;
  std::size_t n = 77;
  while (n > 0 && (static_cast<unsigned char>(p[n]) & 0xC0) == 0x80) --n;
  return p.substr(0, n) + "...";
}

}  // namespace qattn::cli
