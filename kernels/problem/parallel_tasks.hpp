#pragma once
// Runs f(t) for t in [0, n) on OpenMP threads, one task at a time per thread (dynamic schedule).
// An exception may not leave an OpenMP region (the runtime would terminate the process with
// "terminate called recursively"), so the first one thrown is kept, the tasks not yet started are
// skipped, and it is rethrown on the calling thread. Host code only; the caller compiles with OpenMP.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

namespace qattn {

// Threads are tuning only. More than a few per processor never helps, and counts in the thousands
// exhaust the memory for their stacks inside the OpenMP runtime (a crash, not an error).
constexpr int kThreadsPerProcessor = 4;

inline int max_threads() { return kThreadsPerProcessor * std::max(1, omp_get_num_procs()); }

// The thread count for `threads` (0: OpenMP's default, which OMP_NUM_THREADS sets), or
// std::invalid_argument naming where a count above max_threads() came from.
inline int checked_threads(int threads) {
  const int limit = max_threads();
  const std::string allowed = "expected at most " + std::to_string(limit) + " (" + std::to_string(kThreadsPerProcessor) + " per processor of this machine)";
  if (threads < 0) throw std::invalid_argument("threads = " + std::to_string(threads) + "; expected 0 (OpenMP's default) or a positive count, " + allowed);
  if (threads > limit) throw std::invalid_argument("threads = " + std::to_string(threads) + "; " + allowed);
  if (threads > 0) return threads;
  const int omp_default = omp_get_max_threads();
  if (omp_default > limit) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    throw std::invalid_argument("OMP_NUM_THREADS=" + std::string(env ? env : "?") + " asks for " + std::to_string(omp_default) + " threads; " + allowed);
  }
  return omp_default;
}

template <class F>
void parallel_tasks(long n, int threads, F&& f) {
  std::exception_ptr first;
  std::atomic<bool> failed{false};
  std::mutex m;
  const int nt = static_cast<int>(std::max(1L, std::min<long>(n, checked_threads(threads))));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (long t = 0; t < n; ++t) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      f(t);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(m);
      if (!first) first = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace qattn
