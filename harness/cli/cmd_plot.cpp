// `qattn plot REPORT_DIR`: render the figures again from the figure data.
#include <filesystem>
#include <stdexcept>

#include "harness/cli/commands.hpp"
#include "harness/experiment/runner.hpp"

namespace qattn::cli {

Action add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Render a report folder's figures from its figure data (matplotlib)");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("report", *dir, "Report folder written by qattn run")->required();
  return [dir]() {
    if (!std::filesystem::exists(std::filesystem::path(*dir) / "figures" / "p_mass_per_decade.csv")) {
      throw std::invalid_argument(*dir + ": not a report folder (figures/p_mass_per_decade.csv missing); expected a folder written by qattn run");
    }
    return render_figures(*dir) ? 0 : 1;
  };
}

}  // namespace qattn::cli
