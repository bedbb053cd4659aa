#include "harness/experiment/report_run.hpp"

#include <fmt/core.h>

#include <fstream>
#include <stdexcept>

namespace qattn::report {

namespace fs = std::filesystem;
using nlohmann::json;

Existing existing_for(const std::string& command, bool force, bool resume, FlagSpelling flags) {
  if (force && resume) {
    throw std::invalid_argument(fmt::format("{}: {} and {} exclude each other (complete the report, or replace it)", command, flags.resume, flags.force));
  }
  return force ? Existing::replace : resume ? Existing::resume : Existing::refuse;
}

std::unique_ptr<FolderLock> claim_for(const fs::path& dir, Existing existing, bool resumable, FlagSpelling flags) {
  const std::string advice = resumable ? fmt::format("pass {} to complete it or {} to replace it", flags.resume, flags.force)
                                       : fmt::format("pass {} to replace it", flags.force);
  return claim_report_folder(dir, existing, advice);
}

ReportRun::ReportRun(fs::path dir, Existing existing, bool resumable, FlagSpelling flags)
    : dir_(std::move(dir)), existing_(existing), lock_(claim_for(dir_, existing, resumable, flags)) {}

json ReportRun::previous_config() const {
  if (existing_ != Existing::resume || !fs::exists(dir_ / "config.json")) return nullptr;
  const json before = json::parse(std::ifstream(dir_ / "config.json"), nullptr, false);
  if (!before.is_object()) {
    throw std::invalid_argument((dir_ / "config.json").string() + ": not a report's config (a JSON object); the report cannot be resumed (use --force to replace it)");
  }
  return before;
}

void ReportRun::refuse_changed(const json& now, std::initializer_list<const char*> keys, const std::string& message) const {
  const json before = previous_config();
  if (before.is_null()) return;
  std::string changed;
  const auto add = [&](const std::string& what) { changed += (changed.empty() ? "" : ", ") + what; };
  const auto shown = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (const char* k : keys) {
    const json was = before.value(k, json()), is = now.value(k, json());
    if (was == is) continue;
    if (!was.is_object() || !is.is_object()) {
      add(k);
      continue;
    }
    // A map (run's recipes): each entry that changed or went, by name.
    for (const auto& [name, v] : is.items())
      if (was.contains(name) && was[name] != v) add(fmt::format("{}.{} ({} -> {})", k, name, shown(was[name]), shown(v)));
    for (const auto& [name, v] : was.items()) {
      (void)v;
      if (!is.contains(name)) add(fmt::format("{}.{} (removed)", k, name));
    }
  }
  if (!changed.empty()) throw std::invalid_argument(dir_.string() + ": " + fmt::format(fmt::runtime(message), changed));
}

void ReportRun::write_config(json config, const std::string& command_line) const {
  config["git_commit"] = git_commit();
  config["build_type"] = QATTN_BUILD_TYPE;
  config["date"] = now_utc();
  config["command_line"] = command_line;
  write_atomic(dir_ / "config.json", config.dump(2) + "\n");
}

void ReportRun::finish(const std::string& summary_md, const Ending& how) const {
  write_atomic(dir_ / "summary.md", summary_md);
  if (how.print && how.summary_first) fmt::print("\n{}", summary_md);
  const bool drawn = how.figures == nullptr || !how.draw || render_figures(dir_.string(), *how.figures, how.quiet_figures);
  if (how.print) fmt::print("{}\nreport: {} ({})\n", how.summary_first ? "" : summary_md, dir_.string(), how.files);
  if (!drawn) throw_figures_missing(dir_.string());
}

json dataset_provenance(const std::string& dataset, const std::string& model) {
  return {{"dataset", dataset}, {"dataset_fnv1a64", fmt::format("{:016x}", fnv1a_file(dataset))}, {"model", model}};
}

}  // namespace qattn::report
