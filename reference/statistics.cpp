#include "reference/statistics.hpp"

#include <algorithm>
#include <cmath>

namespace qattn {

std::array<double, kDecades> mass_per_decade(std::span<const double> p) {
  std::array<double, kDecades> bins{};
  double total = 0;
  for (double x : p) {
    if (!(x > 0)) continue;
    total += x;
    // Edges as literals (the doubles nearest 10^-k), so 0.01 lands in [1e-2, 1e-1) exactly.
    constexpr double edges[kDecades - 1] = {1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8};
    int k = 0;
    while (k < kDecades - 1 && x < edges[k]) ++k;
    bins[k] += x;
  }
  if (total > 0)
    for (double& b : bins) b /= total;
  return bins;
}

double mass_flushed(std::span<const double> p, double threshold) {
  double mx = 0, total = 0, flushed = 0;
  for (double x : p) mx = std::max(mx, x);
  for (double x : p) {
    total += x;
    if (x > 0 && x <= threshold * mx) flushed += x;
  }
  return total > 0 ? flushed / total : 0.0;
}

}  // namespace qattn
