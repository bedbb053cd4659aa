#pragma once
// Scoring attention outputs that a kernel outside the lab made (harness/io/outputs_file.hpp) on a
// dump's inputs. Per layer, context and query head it measures three distances:
//   kernel vs float64        the kernel's whole error;
//   recipe vs float64        the error its number formats cost (the named recipe's emulation);
//   kernel vs recipe         the kernel's own error, beyond its formats.
// It writes a report folder (config.json, results.jsonl, results.csv, summary.md, figures/) that
// `qattn check` can gate.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/io/dataset_file.hpp"
#include "harness/io/outputs_file.hpp"

namespace qattn {

struct ScoreOptions {
  std::string dataset;                // the dump whose inputs the kernel ran on
  std::vector<std::string> outputs;   // qattn-outputs/1 files (several: e.g. one per context)
  std::string recipe;                 // one-line recipe for every file; "" = each file's `recipe` attribute (or none)
  std::string output;                 // report folder
  bool force = false;                 // replace an existing report folder that qattn made
  bool quiet = false;                 // no summary on stdout
  bool progress = true;               // a unit's progress and ETA on stderr
  std::string command_line;
  // Called between units (may throw to stop: the Python bindings raise KeyboardInterrupt there).
  std::function<void()> between_units;
};

// Reads outputs files made on `dataset` (opened as info), each layer's declared shape checked against
// the dump before its outputs are read (layer, heads, head dim, context, rows); throws DatasetError
// naming the file and the layer. Shared by score and fit.
std::vector<OutputsFile> read_outputs_of_dump(const DatasetInfo& info, const std::string& dataset, const std::vector<std::string>& paths);

// Everything is checked (files, layers, heads, shapes, rows, contexts, recipes) before any work.
// Throws std::invalid_argument or DatasetError with one message naming the file and field.
// Returns the rows of results.jsonl, as written (a value: callers need not read the file back).
std::vector<nlohmann::json> score_outputs(const ScoreOptions& opt);

}  // namespace qattn
