#include "harness/experiment/report_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/experiment/report_io.hpp"
#include "harness/experiment/report_shards.hpp"

namespace qattn::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every file a run or a score writes into its folder, and nothing else.
constexpr const char* kReportFiles[] = {"results.jsonl", "results.csv", "stats.jsonl", "not_covered.jsonl", "failed.jsonl", "summary.md", "config.json"};

void remove_report_contents(const fs::path& dir) {
  for (const char* f : kReportFiles) fs::remove(dir / f);
  fs::remove_all(dir / kShardsFolder);
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir / "figures", ec)) {
    if (f.path().extension() == ".csv" || f.path().extension() == ".png") fs::remove(f.path());
  }
}

}  // namespace

bool is_report_folder(const fs::path& dir) {
  if (!fs::is_directory(dir)) return false;
  if (fs::exists(dir / kReportMarker)) return true;
  if (!fs::is_regular_file(dir / "config.json")) return false;
  const json c = json::parse(std::ifstream(dir / "config.json"), nullptr, false);
  // A run's config (with its results log) or a score's, as written before the marker existed.
  const bool run = c.is_object() && c.contains("experiment_file") && c.contains("dataset_fnv1a64") && c.contains("git_commit") &&
                   fs::exists(dir / "results.jsonl");
  const bool score = c.is_object() && c.contains("git_commit") && c.contains("command_line");
  return run || score;
}

FolderLock::FolderLock(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fd_ = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::invalid_argument(dir.string() + ": cannot create or write the report folder");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    throw std::invalid_argument(dir.string() + ": another qattn command is writing this report folder; nothing in it was changed; wait for it to finish");
  }
}

FolderLock::~FolderLock() { ::close(fd_); }

std::unique_ptr<FolderLock> claim_report_folder(const fs::path& dir, Existing existing, const std::string& flags) {
  if (fs::exists(dir) && existing == Existing::refuse) throw std::invalid_argument(dir.string() + ": the report folder exists; " + flags);
  if (fs::exists(dir) && !is_report_folder(dir)) {
    throw std::invalid_argument(dir.string() + ": exists but is not a report folder qattn wrote (no " + std::string(kReportMarker) +
                                "); qattn replaces or completes only those: choose another output folder or remove it yourself");
  }
  auto lock = std::make_unique<FolderLock>(dir);
  if (existing == Existing::replace) remove_report_contents(dir);
  std::error_code ec;
  fs::create_directories(dir / "figures", ec);
  if (ec || ::access(dir.c_str(), W_OK) != 0) throw std::invalid_argument(dir.string() + ": cannot create or write the report folder");
  write_atomic(dir / kReportMarker, "qattn report folder: `qattn run --force` and `qattn score --force` may replace what is in it\n");
  return lock;
}

}  // namespace qattn::report
