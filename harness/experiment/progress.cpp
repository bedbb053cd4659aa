#include "harness/experiment/progress.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace qattn {

namespace {
std::string duration(double s) {
  return s < 90 ? fmt::format("{:.0f} s", s) : s < 5400 ? fmt::format("{:.1f} min", s / 60) : fmt::format("{:.1f} h", s / 3600);
}
}  // namespace

Progress::Progress(double total_cost, std::size_t units, bool quiet, bool lines)
    : total_(total_cost), units_(units), tty_(::isatty(STDERR_FILENO) != 0), quiet_(quiet || (!tty_ && !lines)), t0_(std::chrono::steady_clock::now()) {}

void Progress::step(const std::string& what, double cost) {
  ++done_units_;
  done_ += cost;
  if (quiet_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double eta = done_ > 0 ? s * std::max(0.0, total_ - done_) / done_ : 0;
  if (tty_) {
    const int width = 30, fill = std::clamp(static_cast<int>(width * done_ / std::max(total_, 1e-300)), 0, width);
    fmt::print(stderr, "\r[{}{}] {}/{} ETA {}  {:<50.50}", std::string(fill, '#'), std::string(width - fill, '.'), done_units_, units_,
               duration(eta), what);
    if (done_units_ == units_) fmt::print(stderr, "\n");
  } else {
    fmt::print(stderr, "[{}/{}] {} (ETA {})\n", done_units_, units_, what, duration(eta));
  }
  std::fflush(stderr);
}

}  // namespace qattn
