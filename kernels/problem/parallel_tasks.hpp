#pragma once
// Runs f(t) for t in [0, n) on OpenMP threads, one task at a time per thread (dynamic schedule).
// An exception may not leave an OpenMP region (the runtime would terminate the process with
// "terminate called recursively"), so the first one thrown is kept, the tasks not yet started are
// skipped, and it is rethrown on the calling thread. Host code only; the caller compiles with OpenMP.
#include <omp.h>

#include <atomic>
#include <exception>
#include <mutex>

namespace qattn {

template <class F>
void parallel_tasks(long n, int threads, F&& f) {
  std::exception_ptr first;
  std::atomic<bool> failed{false};
  std::mutex m;
  const int nt = threads > 0 ? threads : omp_get_max_threads();
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
