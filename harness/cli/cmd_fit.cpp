// `qattn fit`: the recipe nearest a kernel's outputs, by a beam search over single-knob moves.
#include "harness/cli/commands.hpp"
#include "harness/experiment/fit.hpp"

namespace qattn::cli {

Action add_fit_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("fit", "Find the recipe a kernel implements from its outputs (qattn-outputs/1) on a dump: a beam search over "
                                        "single-knob moves, nearest by kernel-vs-recipe SQNR; writes a report folder");
  auto o = std::make_shared<FitOptions>();
  cmd->add_option("dump", o->dataset, "The dump (qattn-dump/1) whose Q/K/V the kernel ran on")->required();
  cmd->add_option("outputs", o->outputs, "The kernel's outputs files (qattn-outputs/1)")->required();
  cmd->add_option("--from", o->start, "The recipe the search starts from (default: the files' 'recipe' attribute)");
  cmd->add_option("--output,-o", o->output, "Report folder to write")->required();
  cmd->add_option("--rows", o->rows, "Query rows sampled per layer and context (0 = every row the files hold)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the row sample")->capture_default_str()->check(kSeed);
  cmd->add_option("--budget", o->budget_s, "Time budget in seconds (the best so far is reported when it runs out)")->capture_default_str();
  cmd->add_option("--min-gain", o->min_gain_db, "Take a move only if it brings the recipe more than this many dB nearer")->capture_default_str();
  cmd->add_option("--top", o->top, "Recipes listed in the ranking")->capture_default_str();
  cmd->add_option("--beam", o->beam, "Recipes expanded per step (1: a greedy descent)")->capture_default_str();
  cmd->add_flag("--resume", o->resume, "Reuse the evaluations of an earlier fit of the same outputs in this folder");
  cmd->add_flag("--force", o->force, "Replace an existing report folder (only one qattn wrote)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress on stderr and no summary on stdout");
  return [o]() {
    o->command_line = "qattn fit " + o->dataset;
    for (const auto& f : o->outputs) o->command_line += " " + f;
    if (!o->start.empty()) o->command_line += " --from '" + o->start + "'";
    o->command_line += " --output " + o->output;
    const FitResult r = fit_recipe(*o);
    return r.meets_rule ? 0 : 1;
  };
}

}  // namespace qattn::cli
