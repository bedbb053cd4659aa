// `qattn check BOUNDS.json`: recompute and fail on any regression.
#include "harness/cli/commands.hpp"

#include <filesystem>
#include <stdexcept>
#include "harness/experiment/bounds.hpp"

namespace qattn::cli {

Action add_check_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "Recompute an experiment and compare with its stored error bounds (exit 1 on any regression)");
  auto file = std::make_shared<std::string>();
  auto update = std::make_shared<bool>(false);
  cmd->add_option("bounds", *file, "Bounds JSON (names its experiment)")->required();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_flag("--update", *update, "Rewrite the bounds from this run (a deliberate change)");
  cmd->add_flag("--quiet,-q", *quiet, "No progress on stderr (failures still print there)");
  return [file, update, quiet]() {
    try {
      return check_bounds(*file, *update, *quiet) == 0 ? 0 : 1;
    } catch (const std::filesystem::filesystem_error& e) {  // a path in the file the system refuses
      const std::string path = qattn::cli::brief_path(e.path1().string());
      throw std::invalid_argument(*file + ": path '" + path + "': " + e.code().message());
    }
  };
}

}  // namespace qattn::cli
