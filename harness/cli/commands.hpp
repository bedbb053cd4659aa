#pragma once
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

}  // namespace qattn::cli
