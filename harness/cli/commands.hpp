#pragma once
#include <algorithm>
#include <string>
#include <vector>
// Each subcommand registers its options on the app and returns the action to run when chosen.
#include <CLI/CLI.hpp>
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


// A path for an error message: at most 80 bytes, cut on a UTF-8 character boundary.
inline std::string brief_path(const std::string& p) {
  if (p.size() <= 80) return p;
  std::size_t n = 77;
  while (n > 0 && (static_cast<unsigned char>(p[n]) & 0xC0) == 0x80) --n;
  return p.substr(0, n) + "...";
}

// Levenshtein distance, for "did you mean" (command names are a few characters).
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

}  // namespace qattn::cli
