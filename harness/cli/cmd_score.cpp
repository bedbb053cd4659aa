// `qattn score DUMP OUTPUTS.h5...`: a kernel the lab did not write, measured against float64 and
// against the recipe it implements.
#include "harness/cli/commands.hpp"
#include "harness/experiment/score.hpp"

namespace qattn::cli {

Action add_score_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("score",
                                 "Score outputs made by any kernel (HDF5 schema qattn-outputs/1) on a dump's inputs: kernel vs float64, "
                                 "the recipe's emulation vs float64, kernel vs emulation; writes a report folder");
  auto o = std::make_shared<ScoreOptions>();
  cmd->add_option("dump", o->dataset, "The dump (qattn-dump/1) whose Q/K/V the kernel ran on")->required();
  cmd->add_option("outputs", o->outputs, "Outputs files (qattn-outputs/1), e.g. one per context")->required();
  cmd->add_option("--recipe", o->recipe, "One-line recipe the kernel implements (default: each file's 'recipe' attribute, if any)");
  cmd->add_option("--output,-o", o->output, "Report folder to write")->required();
  cmd->add_flag("--force", o->force, "Replace an existing report folder (only one qattn wrote)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress on stderr and no summary on stdout");
  return [o]() {
    o->progress = !o->quiet;
    o->command_line = "qattn score " + o->dataset;
    for (const auto& f : o->outputs) o->command_line += " " + f;
    if (!o->recipe.empty()) o->command_line += " --recipe '" + o->recipe + "'";
    o->command_line += " --output " + o->output + (o->force ? " --force" : "");
    score_outputs(*o);
    return 0;
  };
}

}  // namespace qattn::cli
