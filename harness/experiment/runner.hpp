#pragma once
// Runs an experiment into its report folder: results.jsonl (appended a unit at a time, fsynced,
// the resume log), results.csv, stats.jsonl, summary.md, config.json and figure data.
#include <string>

#include "harness/experiment/experiment.hpp"

namespace qattn {

struct RunOptions {
  bool resume = false;   // complete an interrupted run without repeating a unit
  bool force = false;    // replace an existing report folder
  bool quiet = false;    // no progress on stderr (warnings and errors still)
  bool progress_lines = true;  // progress on a stderr that is no terminal: a line per unit (else none)
  bool summary = true;   // print summary.md and draw the figures (qattn check wants only the numbers)
  std::string backend = "emulate";
  std::string command_line;
};

// Checks everything it can before any work (dataset, layers, heads, contexts, output folder),
// then runs. Throws std::invalid_argument / DatasetError with one clear message.
void run_experiment(const Experiment& e, const RunOptions& opt);

}  // namespace qattn
