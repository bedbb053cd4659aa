// `qattn plot REPORT_DIR`: render the figures again from the figure data.
#include <filesystem>
#include <stdexcept>

#include "harness/cli/commands.hpp"
#include "harness/experiment/report_io.hpp"

namespace qattn::cli {

Action add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Render a report folder's figures from its figure data (matplotlib)");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("report", *dir, "Report folder written by qattn run or qattn score")->required();
  return [dir]() {
    namespace fs = std::filesystem;
    const fs::path figures = fs::path(*dir) / "figures";
    // Each kind's figure data has a file the other lacks.
    if (fs::exists(figures / "p_mass_per_decade.csv")) return report::render_figures(*dir, report::ReportKind::run) ? 0 : 1;
    if (fs::exists(figures / "score_per_head.csv")) return report::render_figures(*dir, report::ReportKind::score) ? 0 : 1;
    throw std::invalid_argument(*dir + ": not a report folder (neither figures/p_mass_per_decade.csv nor figures/score_per_head.csv); expected a folder written by qattn run or qattn score");
  };
}

}  // namespace qattn::cli
