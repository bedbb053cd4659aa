// qattn: the accuracy laboratory's single command-line entry point.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "harness/cli/commands.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/parallel/ranks.hpp"

int main(int argc, char** argv) {
  const qattn::ranks::Session ranks(&argc, &argv);  // MPI, when mpirun or srun started this process
  // The installed package's launcher (`qattn` from pip: python/qattn/_cli.py) names the interpreter
  // that draws figures and the scripts it carries, which the build's paths no longer reach.
  if (argc >= 4 && std::string(argv[1]) == "--installed-figures") {
    qattn::report::set_figure_tools(argv[2], argv[3]);
    argv[3] = argv[0];
    argv += 3;
    argc -= 3;
  }
  CLI::App app{"qattn: an accuracy laboratory for quantized flash attention"};
  app.set_version_flag("--version", std::string("qattn ") + QATTN_VERSION + " (build " + QATTN_CLI_BUILD_TYPE + ", GPU kernels: " +
                                        (std::string(QATTN_GPU_NAME) == "NONE" ? "none" : QATTN_GPU_NAME) + ")");
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
  add(qattn::cli::add_fit_command);
  add(qattn::cli::add_presets_command);
  add(qattn::cli::add_check_command);
  add(qattn::cli::add_plot_command);
  add(qattn::cli::add_bench_command);
  // A mistyped command: name it and the one meant, not only "A subcommand is required".
  if (argc >= 2 && argv[1][0] != '-') {
    std::string known;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names.push_back(sub->get_name());
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::fprintf(stderr, "qattn: error: unknown command '%s'%s; expected one of %s (qattn --help)\n", argv[1],
                   qattn::did_you_mean(argv[1], names).c_str(), known.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 (CLI11's own codes are 100 and up).
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, action] : actions) {
      if (!sub->parsed()) continue;
      // Only `run` splits its work over MPI ranks; any other command would run once per rank.
      if (qattn::ranks::size() > 1 && sub->get_name() != "run") {
        if (qattn::ranks::rank() != 0) return 2;
        std::fprintf(stderr, "qattn: error: %s runs as one process; only `qattn run` shards its work over MPI ranks (start it without mpirun)\n",
                     sub->get_name().c_str());
        return 2;
      }
      return action();
    }
  } catch (const std::filesystem::filesystem_error& e) {  // a path the system refuses (too long, no permission)
    const std::string path = qattn::cli::brief_path(e.path1().string());
    std::fprintf(stderr, "qattn: error: %s: %s\n", path.c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "qattn: error: out of memory: the request (contexts, rows, heads, tiles or splits) needs more memory than this machine has\n");
    return 1;
  } catch (const qattn::ranks::OtherRankFailed&) {  // that rank printed its error
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
