#pragma once
// Child processes, started from an argument vector: no shell reads any argument, so a quote, a `;`
// or a `$(...)` in a report path or an experiment's name stays a character of that argument.
#include <optional>
#include <string>
#include <vector>

namespace qattn {

// How a child ended: its exit status, or the signal that killed it (signal > 0), or that it could
// not start (started false, with the reason in error).
struct ProcessStatus {
  bool started = false;
  int exit_code = -1;
  int signal = 0;
  std::string error;

  bool ok() const { return started && signal == 0 && exit_code == 0; }
  // "exited 2", "killed by signal 9", "could not start: No such file or directory".
  std::string text() const;
};

// Runs argv[0] (a path, or a name looked up on PATH) with argv[1..]; the child shares our standard
// streams, and we wait for it (through EINTR).
ProcessStatus run_process(const std::vector<std::string>& argv);

// Runs argv with stdin and stderr on /dev/null and returns what it printed on stdout, or nothing if
// it could not start or did not exit 0.
std::optional<std::string> process_output(const std::vector<std::string>& argv);

}  // namespace qattn
