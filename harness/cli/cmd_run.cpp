// `qattn run EXPERIMENT.json`: the sweep, into reports/<name>/.
#include "harness/cli/commands.hpp"

#include <filesystem>
#include <stdexcept>
#include "harness/experiment/runner.hpp"
#include "harness/parallel/ranks.hpp"

namespace qattn::cli {

Action add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run an experiment file into its report folder");
  struct Opts {
    std::string file;
    RunOptions run;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("experiment", o->file, "Experiment JSON")->required();
  cmd->add_flag("--resume", o->run.resume, "Complete an interrupted run without repeating rows");
  cmd->add_flag("--force", o->run.force, "Replace an existing report folder");
  cmd->add_flag("--quiet,-q", o->run.quiet, "No progress on stderr (the summary, warnings and errors still print)");
  cmd->add_option("--backend", o->run.backend, "emulate, or gpu (a build with -DQATTN_GPU=CUDA or HIP)")->capture_default_str();
  return [o]() {
    o->run.command_line = "qattn run " + o->file + (o->run.resume ? " --resume" : "") + (o->run.force ? " --force" : "");
    try {
      // Under mpirun every rank reads the file; one rank reports a mistake in it, not each.
      Experiment e;
      std::exception_ptr err;
      try {
        e = read_experiment(o->file);
      } catch (...) {
        err = std::current_exception();
      }
      ranks::agree(err);
      run_experiment(e, o->run);
    } catch (const std::filesystem::filesystem_error& e) {  // a path in the file the system refuses
      const std::string path = qattn::cli::brief_path(e.path1().string());
      throw std::invalid_argument(o->file + ": path '" + path + "': " + e.code().message());
    }
    return 0;
  };
}

}  // namespace qattn::cli
