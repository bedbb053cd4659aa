#include "reference/channel_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace qattn {

ChannelOutliers channel_outliers(const TensorF& t, int head, int tokens, bool subtract_mean) {
  if (head < 0 || head >= t.heads) throw std::invalid_argument("channel_outliers: head " + std::to_string(head) + " out of range");
  const int n = tokens == 0 ? t.tokens : std::min(tokens, t.tokens);
  ChannelOutliers s;
  std::vector<double> mean(t.dim, 0.0);
  if (subtract_mean) {
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < t.dim; ++c) mean[c] += t(head, i, c);
    for (double& m : mean) m /= n;
  }
  s.absmax.assign(t.dim, 0.0);
  for (int i = 0; i < n; ++i) {
    const float* row = t.row(head, i);
    for (int c = 0; c < t.dim; ++c) s.absmax[c] = std::max(s.absmax[c], std::fabs(static_cast<double>(row[c]) - mean[c]));
  }
  std::vector<double> sorted = s.absmax;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t d = sorted.size();
  s.median = d % 2 ? sorted[d / 2] : 0.5 * (sorted[d / 2 - 1] + sorted[d / 2]);
  const auto it = std::max_element(s.absmax.begin(), s.absmax.end());
  s.max = *it;
  s.max_channel = static_cast<int>(it - s.absmax.begin());
  // All channels zero: none stands out (ratio 1). Over half zero but one not: unbounded (inf).
  s.ratio = s.median > 0 ? s.max / s.median : s.max > 0 ? std::numeric_limits<double>::infinity() : 1.0;
  s.int8_levels_median = s.max > 0 ? 127.0 * s.median / s.max : 0.0;
  return s;
}

}  // namespace qattn
