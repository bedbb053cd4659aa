#include "harness/system/process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace qattn {

namespace {

// Starts argv; quiet puts the child's stdin and stderr on /dev/null, and stdout_fd (when >= 0)
// becomes its stdout. Returns the pid, or -1 with the reason in error.
pid_t spawn(const std::vector<std::string>& argv, bool quiet, int stdout_fd, std::string& error) {
  if (argv.empty() || argv[0].empty()) {
    error = "no program named";
    return -1;
  }
  std::vector<char*> args;  // posix_spawnp takes char* const[]; the strings outlive the call
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  // The child starts with default signal handling and nothing blocked, whatever the caller set
  // (Python ignores SIGPIPE; a test runner may block signals).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::fflush(nullptr);  // the child writes to the same streams: ours first, never interleaved
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = std::strerror(rc);
    return -1;
  }
  return pid;
}

ProcessStatus wait_for(pid_t pid) {
  ProcessStatus s;
  s.started = true;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      s.error = std::string("waiting for it failed: ") + std::strerror(errno);
      return s;
    }
  }
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
  return s;
}

}  // namespace

std::string ProcessStatus::text() const {
  if (!started) return "could not start: " + error;
  if (!error.empty()) return error;
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exited " + std::to_string(exit_code);
}

ProcessStatus run_process(const std::vector<std::string>& argv) {
  ProcessStatus s;
  const pid_t pid = spawn(argv, false, -1, s.error);
  return pid < 0 ? s : wait_for(pid);
}

std::optional<std::string> process_output(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  std::string error;
  const pid_t pid = spawn(argv, true, fds[1], error);  // dup2 clears close-on-exec on the child's copy
  ::close(fds[1]);
  std::string out;
  // Read until the child closes its end, then wait: a child that fills the pipe never blocks on us.
  for (char buf[4096]; pid >= 0;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  if (pid < 0 || !wait_for(pid).ok()) return std::nullopt;
  return out;
}

}  // namespace qattn
