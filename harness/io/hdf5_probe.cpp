#include "harness/io/hdf5_probe.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

#include "harness/io/dataset_file.hpp"
#include "harness/system/fork_inherit.hpp"

namespace qattn {

namespace {

// A file's structure (attributes, groups, a few elements per layer) reads in milliseconds; 10 s
// allows a slow disk or network file system.
constexpr unsigned kProbeSeconds = 10;

std::recursive_mutex hdf5_mutex;
bool in_probe_child = false;

}  // namespace

std::unique_lock<std::recursive_mutex> hdf5_lock() {
  if (in_probe_child) return {};  // its copy of the mutex may be held by a thread the child does not have
  return std::unique_lock<std::recursive_mutex>(hdf5_mutex);
}

void read_first_in_child(const std::string& path, const std::function<void()>& read, const std::string& schema) {
  std::fflush(nullptr);
  pid_t pid;
  {
    const auto lock = hdf5_lock();  // no other thread is inside libhdf5 while we fork
    pid = ::fork();
    if (pid == 0) in_probe_child = true;
  }
  if (pid < 0) return;  // no process to spare: read it directly
  if (pid == 0) {
    close_dropped_after_fork();  // the report folders' locks stay with the parent alone
    // The host (Python, a test runner) may ignore, block or handle SIGALRM: the child's must kill it.
    std::signal(SIGALRM, SIG_DFL);
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    ::sigprocmask(SIG_UNBLOCK, &alarm_only, nullptr);
    ::alarm(kProbeSeconds);  // some corruptions make the library loop instead of crash
    // The child's output is never the user's: an ordinary error is met again by the parent, and a
    // death (with whatever the library or a sanitizer prints about it) is reported as one line.
    if (const int null_fd = ::open("/dev/null", O_WRONLY); null_fd >= 0) {
      ::dup2(null_fd, STDOUT_FILENO);
      ::dup2(null_fd, STDERR_FILENO);
    }
    try {
      read();
    } catch (...) {  // an ordinary error: the parent reports it when it reads the file itself
    }
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    throw DatasetError(path + ": corrupt HDF5 file: reading its structure did not finish in " + std::to_string(kProbeSeconds) +
                       " s (the HDF5 library loops on it); expected an intact " + schema + " file (write it again)");
  }
  // The child's own path always ends in _exit(0): any other status is a death (a sanitizer's SEGV
  // handler exits with 1 instead of dying by the signal).
  if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) {
    const std::string how = WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit status " + std::to_string(WEXITSTATUS(status));
    throw DatasetError(path + ": corrupt HDF5 file: the HDF5 library died reading its structure (" + how + "); expected an intact " +
                       schema + " file (write it again)");
  }
}

}  // namespace qattn
