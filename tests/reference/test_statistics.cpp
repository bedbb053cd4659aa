// Mass per decade and flushed mass on rows worked out by hand.
#include <cmath>
#include <vector>

#include "kernels/formats/format.hpp"
#include "reference/channel_stats.hpp"
#include "reference/statistics.hpp"
#include "tests/catch.hpp"

using namespace qattn;

TEST_CASE("mass per decade puts each probability in its decade", "[statistics]") {
  // Edges belong to the upper decade: 0.1 is in [1e-1, 1]; 1e-8 is in [1e-8, 1e-7).
  const std::vector<double> p{0.5, 0.1, 0.09, 0.01, 1e-8, 5e-9, 0.0};
  const auto bins = mass_per_decade(p);
  const double total = 0.5 + 0.1 + 0.09 + 0.01 + 1e-8 + 5e-9;
  CHECK(std::fabs(bins[0] - 0.6 / total) < 1e-15);   // divisions of exact sums: an ulp or two
  CHECK(std::fabs(bins[1] - (0.09 + 0.01) / total) < 1e-15);  // [1e-2, 1e-1) holds 0.09 and 0.01
  CHECK(bins[2] == 0.0);
  CHECK(bins[3] == 0.0);
  CHECK(std::fabs(bins[7] - 1e-8 / total) < 1e-22);
  CHECK(std::fabs(bins[8] - 5e-9 / total) < 1e-22);
  double sum = 0;
  for (double b : bins) sum += b;
  CHECK(std::fabs(sum - 1) < 1e-15);
}

TEST_CASE("mass flushed below a P format's threshold relative to the row max", "[statistics]") {
  const double int8_at_127 = flush_threshold(format_of(FormatId::int8)) / 127;  // 0.5 / 127 = 3.94e-3
  const double e4m3_at_448 = flush_threshold(format_of(FormatId::e4m3)) / 448;  // 2^-10 / 448 = 2.18e-6
  CHECK(std::fabs(int8_at_127 - 3.937e-3) < 1e-6);
  CHECK(std::fabs(e4m3_at_448 - 2.18e-6) < 1e-8);
  // Max 0.5: int8 flushes p <= 0.5 * 3.94e-3 = 1.97e-3, i.e. the 1e-3 and 1e-6 entries.
  const std::vector<double> p{0.5, 0.4, 0.0989, 1e-3, 1e-4, 1e-6, 0.0};
  const double total = 0.5 + 0.4 + 0.0989 + 1e-3 + 1e-4 + 1e-6;
  CHECK(std::fabs(mass_flushed(p, int8_at_127) - (1e-3 + 1e-4 + 1e-6) / total) < 1e-15);
  // e4m3 flushes p <= 0.5 * 2.18e-6 = 1.09e-6: the 1e-6 entry.
  CHECK(std::fabs(mass_flushed(p, e4m3_at_448) - 1e-6 / total) < 1e-18);
}

TEST_CASE("channel outliers before and after subtracting the channel mean", "[statistics]") {
  // Channel 0 is a biased channel (10, 12), channels 1 and 2 are centred (+-1, +-2).
  TensorF k(1, 2, 3);
  k.data = {10, 1, 2, 12, -1, -2};
  const ChannelOutliers raw = channel_outliers(k, 0), smoothed = channel_outliers(k, 0, 0, true);
  CHECK(raw.max == 12);
  CHECK(raw.median == 2);
  CHECK(raw.ratio == 6);
  CHECK(raw.max_channel == 0);
  CHECK(std::fabs(raw.int8_levels_median - 127.0 * 2 / 12) < 1e-12);
  CHECK(smoothed.absmax == std::vector<double>{1, 1, 2});  // channel 0 becomes -1, +1
  CHECK(smoothed.ratio == 2);
  CHECK(smoothed.int8_levels_median == 63.5);
}
