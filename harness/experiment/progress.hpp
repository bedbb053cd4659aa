#pragma once
// Progress and ETA of a command's units on stderr (stdout holds the plan and the summary): redrawn
// in place on a terminal, a line per unit otherwise. The ETA weighs each unit by its cost (the
// caller's measure of its work, counted the same way in the total and in each step), so it
// reaches 0 at the last unit. `qattn run` and `qattn score` both report through it.
#include <chrono>
#include <cstddef>
#include <string>

namespace qattn {

class Progress {
 public:
  // quiet: nothing; lines = false: nothing on a stderr that is no terminal (a log gets no lines).
  Progress(double total_cost, std::size_t units, bool quiet, bool lines = true);
  void step(const std::string& what, double cost);

 private:
  double total_, done_ = 0;
  std::size_t units_, done_units_ = 0;
  bool tty_, quiet_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace qattn
