// qattn: the accuracy laboratory's single command-line entry point.
#include <cstdio>
#include <exception>
#include <map>

#include "harness/cli/commands.hpp"
#include "harness/io/dataset_file.hpp"

int main(int argc, char** argv) {
  CLI::App app{"qattn: an accuracy laboratory for quantized flash attention"};
  app.require_subcommand(1);
  std::map<CLI::App*, qattn::cli::Action> actions;
  const auto add = [&](qattn::cli::Action (*adder)(CLI::App&)) {
    auto action = adder(app);
    actions[app.get_subcommands({}).back()] = std::move(action);
  };
  add(qattn::cli::add_formats_command);
  add(qattn::cli::add_inspect_command);
  add(qattn::cli::add_synth_command);
  add(qattn::cli::add_eval_command);
  add(qattn::cli::add_run_command);
  add(qattn::cli::add_score_command);
  add(qattn::cli::add_presets_command);
  add(qattn::cli::add_check_command);
  add(qattn::cli::add_plot_command);
  add(qattn::cli::add_bench_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, action] : actions) {
      if (sub->parsed()) return action();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
