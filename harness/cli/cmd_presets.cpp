// `qattn presets`: the named recipes of real kernels, each with the source it was read from.
#include <fmt/core.h>

#include "harness/cli/commands.hpp"
#include "harness/io/recipe_io.hpp"

namespace qattn::cli {

Action add_presets_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("presets", "List the named recipes (preset=NAME) of real kernels, with their sources");
  auto lines = std::make_shared<bool>(false);
  cmd->add_flag("--lines", *lines, "Print only NAME and the one-line recipe, tab-separated");
  return [lines]() {
    for (const RecipePreset& p : recipe_presets()) {
      if (*lines) {
        fmt::print("{}\t{}\n", p.name, p.line);
        continue;
      }
      fmt::print("{}\n  source: {}\n  note:   {}\n  recipe: {}\n", p.name, p.source, p.note, p.line);
    }
    return 0;
  };
}

}  // namespace qattn::cli
