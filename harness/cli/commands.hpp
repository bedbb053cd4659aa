#pragma once
#include <string>
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
Action add_presets_command(CLI::App& app);


// A path for an error message: at most 80 bytes, cut on a UTF-8 character boundary.
inline std::string brief_path(const std::string& p) {
  if (p.size() <= 80) return p;
  std::size_t n = 77;
  while (n > 0 && (static_cast<unsigned char>(p[n]) & 0xC0) == 0x80) --n;
  return p.substr(0, n) + "...";
}

}  // namespace qattn::cli
