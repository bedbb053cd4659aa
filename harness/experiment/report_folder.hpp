#pragma once
// Who owns a report folder, shared by `qattn run`, `qattn score` and the end-to-end evaluation
// (qattn.model_eval, through the bindings): how a folder qattn wrote is
// recognised, the lock its writer holds for its whole life, and what --force may remove. The lock
// is taken before anything is removed, so --force never deletes under another writer, and it
// removes the report's own files only: a user's notes and the kernel outputs in outputs/ stay.
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

namespace qattn::report {

inline constexpr const char* kReportMarker = ".qattn-report";

// A folder qattn wrote: it holds the marker (or, from before the marker, a config.json by qattn).
bool is_report_folder(const std::filesystem::path& dir);

// An exclusive lock on DIR/.lock (flock: released when the process ends, however it ends, so a
// killed writer never leaves the folder locked). Per process: a second FolderLock on a folder this
// process holds shares the lock (a caller holding its folder while a library call claims it again).
class FolderLock {
 public:
  explicit FolderLock(const std::filesystem::path& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  std::pair<dev_t, ino_t> key_{};
};

// What a command does with a folder that exists already.
enum class Existing { refuse, resume, replace };

// Throws std::invalid_argument naming `what` unless the path is UTF-8: reports are JSON, which
// holds UTF-8 only (a path that is not would fail half way, leaving a half-made folder).
void need_utf8_path(const std::string& what, const std::string& path);

// Makes DIR this process's report folder: refuses an existing folder under Existing::refuse (the
// message suggests `flags`, e.g. "pass --resume to complete it or --force to replace it") and any
// existing folder qattn did not write (one holding only a lock counts as empty); locks it (creating it); under Existing::replace removes the
// report's own files; creates figures/ and the marker. The folder is ours while the lock lives.
std::unique_ptr<FolderLock> claim_report_folder(const std::filesystem::path& dir, Existing existing, const std::string& flags);

}  // namespace qattn::report
