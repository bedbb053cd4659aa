#pragma once
// The steps every report-writing command shares (qattn run, score, fit and check, and through the
// bindings qattn.score and qattn.fit), written once: what --force and --resume do with a folder that
// exists, the claim of the folder for the command's life, the provenance its config.json carries,
// the refusal to resume a report made by something else, and the end (summary.md, figures, the
// closing line). Each command keeps only its distinct steps: what a unit is and how it is scored.
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/experiment/report_folder.hpp"
#include "harness/experiment/report_io.hpp"

namespace qattn::report {

// How the flags are spelled where the user gave them: a command line's or the Python bindings'.
struct FlagSpelling {
  const char* force;   // "--force"
  const char* resume;  // "--resume"
};
inline constexpr FlagSpelling kCommandLineFlags{"--force", "--resume"};
inline constexpr FlagSpelling kPythonFlags{"force=True", "resume=True"};

// The one mapping of a command's force and resume to what it does with an existing folder: replace,
// complete, or refuse. Both together throw, naming the command and the flags as the user spelled them.
Existing existing_for(const std::string& command, bool force, bool resume, FlagSpelling flags = kCommandLineFlags);

// Claims DIR for a command (claim_report_folder), the refusal's advice naming the flags: resume too
// when the command can complete a report (`resumable`). For callers that hold the folder
// themselves (the Python bindings around several library calls).
std::unique_ptr<FolderLock> claim_for(const std::filesystem::path& dir, Existing existing, bool resumable, FlagSpelling flags = kCommandLineFlags);

// A report folder held by one command from claim to end.
class ReportRun {
 public:
  // Claims DIR (report_folder.hpp: an existing folder refused, completed or replaced as `existing`
  // says; a folder qattn did not write always refused); `resumable`: the refusal suggests resume too.
  ReportRun(std::filesystem::path dir, Existing existing, bool resumable, FlagSpelling flags = kCommandLineFlags);
  const std::filesystem::path& dir() const { return dir_; }
  bool resuming() const { return existing_ == Existing::resume; }

  // The config.json an earlier command left, when resuming and there is one; null otherwise.
  // Throws when that file is not a JSON object (it cannot be resumed).
  nlohmann::json previous_config() const;
  // Refuses to resume a report whose stored config differs from `now` in any of `keys` (the keys
  // that define the units and their numbers): old and new results would mix. Names every key that
  // changed (an object's entries one by one) in `message`'s {} (an fmt format naming the remedy).
  void refuse_changed(const nlohmann::json& now, std::initializer_list<const char*> keys, const std::string& message) const;
  // config.json: the command's own keys plus the provenance every report carries (the commit, the
  // build type, the date and the command line; the dump and its hash where the command read one).
  void write_config(nlohmann::json config, const std::string& command_line) const;

  // The end of a report: summary.md written; figures drawn for `figures` when it is set and `draw`;
  // unless print is false, the summary (before the figures when summary_first) and the closing line
  // naming `files`. Throws after all that when figures were asked for and not drawn.
  struct Ending {
    const char* files;                    // "summary.md, results.csv, results.jsonl, config.json, figures/"
    const ReportKind* figures = nullptr;  // none: the report has no figures
    bool print = true;
    bool draw = true;
    bool quiet_figures = false;  // the drawing script names no figure on stdout
    bool summary_first = false;  // printed (after a blank line) before the figures are drawn
  };
  void finish(const std::string& summary_md, const Ending& how) const;

 private:
  std::filesystem::path dir_;
  Existing existing_;
  std::unique_ptr<FolderLock> lock_;
};

// The dump's provenance keys: its path, its FNV-1a hash and the model it holds.
nlohmann::json dataset_provenance(const std::string& dataset, const std::string& model);

}  // namespace qattn::report
