#include "harness/experiment/report_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/experiment/report_io.hpp"
#include "harness/experiment/report_shards.hpp"
#include "harness/io/text.hpp"
#include "harness/system/fork_inherit.hpp"

namespace qattn::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every file a run or a score writes into its folder, and nothing else.
constexpr const char* kReportFiles[] = {"results.jsonl", "results.csv", "stats.jsonl", "not_covered.jsonl", "failed.jsonl", "summary.md", "config.json",
                                        "candidates.jsonl", "fit.json"};

// The folders of a report's own making: a sharded run's shards, the end-to-end evaluation's units.
constexpr const char* kReportFolders[] = {kShardsFolder, "units"};

void remove_report_contents(const fs::path& dir) {
  for (const char* f : kReportFiles) fs::remove(dir / f);
  for (const char* f : kReportFolders) fs::remove_all(dir / f);  // a link there is removed, not followed
  std::error_code ec;
  if (fs::is_symlink(dir / "figures", ec)) return;  // a link to a folder of the user's: never emptied
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
  const bool model_eval = c.is_object() && c.value("schema", json()) == "qattn-model-eval/1";
  return run || score || model_eval;
}

namespace {

// The locks this process holds, by the lock file's device and inode: flock locks an open file
// description, so a second open of the same file in this process would be refused by the first.
// A nested claim on the same thread (qattn.score holding its folder while score_files claims it
// again) shares it; another thread of the process is refused like another process.
struct HeldLock {
  int fd = -1;
  int count = 0;
  std::thread::id owner;
};
std::mutex held_mutex;
std::map<std::pair<dev_t, ino_t>, HeldLock> held;

}  // namespace

FolderLock::FolderLock(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const int fd = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::invalid_argument(dir.string() + ": cannot create or write the report folder");
  }
  const std::lock_guard<std::mutex> guard(held_mutex);
  key_ = {st.st_dev, st.st_ino};
  if (auto it = held.find(key_); it != held.end()) {
    ::close(fd);
    if (it->second.owner != std::this_thread::get_id()) {
      throw std::invalid_argument(dir.string() + ": another qattn command (a thread of this process) is writing this report folder; nothing in it "
                                  "was changed; wait for it to finish");
    }
    ++it->second.count;
    return;
  }
  try {
    drop_in_forked_children(fd);  // a probe child that outlives us must not hold the folder
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    keep_in_forked_children(fd);
    ::close(fd);
    throw std::invalid_argument(dir.string() + ": another qattn command is writing this report folder; nothing in it was changed; wait for it to finish");
  }
  held[key_] = {fd, 1, std::this_thread::get_id()};
}

FolderLock::~FolderLock() {
  const std::lock_guard<std::mutex> guard(held_mutex);
  const auto it = held.find(key_);
  if (it != held.end() && --it->second.count == 0) {
    keep_in_forked_children(it->second.fd);
    ::close(it->second.fd);
    held.erase(it);
  }
}

void need_utf8_path(const std::string& what, const std::string& path) {
  if (!valid_utf8(path)) throw std::invalid_argument(what + ": path \"" + shown_text(path) + "\" is not UTF-8; expected a UTF-8 path (reports are JSON)");
}

namespace {
// A folder holding nothing, or only the lock of a claim that stopped before it wrote anything.
bool empty_but_lock(const fs::path& dir) {
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.path().filename() != ".lock") return false;
  return !ec;
}
}  // namespace

std::unique_ptr<FolderLock> claim_report_folder(const fs::path& dir, Existing existing, const std::string& flags) {
  if (dir.empty()) throw std::invalid_argument("report folder: empty path; expected the name of a folder for the report");
  need_utf8_path("report folder", dir.string());
  if (fs::exists(dir) && existing == Existing::refuse) throw std::invalid_argument(dir.string() + ": the report folder exists; " + flags);
  if (fs::exists(dir) && !is_report_folder(dir) && !empty_but_lock(dir)) {
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
