#pragma once
// Channel-outlier statistics of one head of Q, K or V: each head-dim channel's absmax over all
// tokens, against the median channel. With one symmetric int8 scale for the head, the median
// channel is left 127 * median / max levels (the ZINC document: 3 of 127 for a 44x outlier).
#include <vector>

#include "kernels/formats/tensor.hpp"

namespace qattn {

struct ChannelOutliers {
  std::vector<double> absmax;  // per channel
  double median = 0;           // median of absmax (mean of the middle two for even d)
  double max = 0;
  int max_channel = 0;
  double ratio = 0;            // max / median (inf when the median channel is all zeros)
  double int8_levels_median = 0;
};

// Over the first `tokens` tokens (0 = all); with subtract_mean, after subtracting each channel's
// mean over those tokens (the K smoothing of SageAttention and the ZINC document).
ChannelOutliers channel_outliers(const TensorF& t, int head, int tokens = 0, bool subtract_mean = false);

}  // namespace qattn
