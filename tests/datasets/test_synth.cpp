// The synthetic generator: the statistics it promises are the ones measured.
#include <cmath>
#include <filesystem>

#include "datasets/synth/synth.hpp"
#include "harness/io/dataset_file.hpp"
#include "reference/attention.hpp"
#include "reference/channel_stats.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;

namespace {
SynthSpec small_spec() {
  SynthSpec s;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.tokens = 1024;
  s.dim = 64;
  s.seed = 3;
  return s;
}
}  // namespace

TEST_CASE("the K outlier ratio asked for is the ratio measured", "[synth]") {
  for (double ratio : {4.0, 20.0, 44.0}) {
    INFO("ratio " << ratio);
    SynthSpec s = small_spec();
    s.outlier_channels = 5;
    s.outlier_ratio = ratio;
    s.mean_offset = 0.3;
    const SynthLayer l = synthesize_layer(s, 0);
    REQUIRE(l.outlier_channels.size() == 5);
    for (int h = 0; h < s.kv_heads; ++h) {
      const ChannelOutliers o = channel_outliers(l.k, h);
      // The ratio is set in float64 and stored in fp32: a few fp32 ulps.
      CHECK(std::fabs(o.ratio / ratio - 1) < 1e-6);
      CHECK(std::binary_search(l.outlier_channels.begin(), l.outlier_channels.end(), o.max_channel));
    }
  }
}

TEST_CASE("the ratio survives the trip through an fp16 file", "[synth]") {
  SynthSpec s = small_spec();
  s.outlier_channels = 3;
  s.outlier_ratio = 12.5;
  const SynthLayer l = synthesize_layer(s, 0);
  const auto path = (std::filesystem::temp_directory_path() / ("qattn-synth-" + std::to_string(::getpid()) + ".h5")).string();
  LayerToWrite w;
  w.name = "0";
  w.q = l.q;
  w.k = l.k;
  w.v = l.v;
  w.softmax_scale = 0.125;
  write_dataset(path, {{"schema", attr(std::string("qattn-dump/1"))}, {"model", attr(std::string("synthetic"))},
                       {"weights", attr(std::string("none"))}, {"text_source", attr(std::string("none"))},
                       {"n_tokens", attr(1024LL)}, {"created_by", attr(std::string("tests"))},
                       {"created_at", attr(std::string("now"))}},
                {w}, FormatId::fp16);
  const LayerSlice sl = load_layer(open_dataset(path), "0");
  std::filesystem::remove(path);
  for (int h = 0; h < 2; ++h) {
    // fp16 rounds the max and the two middle channels by at most 2^-11 relative each.
    CHECK(std::fabs(channel_outliers(sl.problem.k, h).ratio / 12.5 - 1) < 0x1p-10);
  }
}

TEST_CASE("synthesis is deterministic for a seed and differs across seeds and layers", "[synth]") {
  SynthSpec s = small_spec();
  s.sinks = 2;
  s.outlier_channels = 2;
  s.outlier_ratio = 8;
  const SynthLayer a = synthesize_layer(s, 0), b = synthesize_layer(s, 0), c = synthesize_layer(s, 1);
  CHECK(a.q.data == b.q.data);
  CHECK(a.k.data == b.k.data);
  CHECK(a.v.data == b.v.data);
  CHECK(a.k.data != c.k.data);
  s.seed = 4;
  CHECK(synthesize_layer(s, 0).q.data != a.q.data);
}

TEST_CASE("attention sinks draw mass to the first tokens", "[synth]") {
  SynthSpec s = small_spec();
  s.q_heads = 2;
  s.kv_heads = 1;
  const auto mass_on_first = [](const SynthSpec& spec) {
    const SynthLayer l = synthesize_layer(spec, 0);
    Problem p;
    p.q = l.q;
    p.k = l.k;
    p.v = l.v;
    p.causal = true;
    p.rows = RowSelection::range_of(1000, 1001);
    ReferenceOptions opt;
    for (int i = 512; i < 1024; i += 64) opt.prob_rows.push_back(i);
    const ReferenceResult r = reference_attention(p, opt);
    double m = 0;
    for (int h = 0; h < r.probs.heads; ++h)
      for (int k = 0; k < r.probs.tokens; ++k) m += r.probs(h, k, 0);
    return m / (r.probs.heads * r.probs.tokens);
  };
  const double without = mass_on_first(s);
  s.sinks = 1;
  s.sink_logit = 8;
  const double with = mass_on_first(s);
  // Raising one key's logit by 8 nats multiplies its weight by e^8 ~ 3000 before renormalization;
  // a factor 100 on the row-averaged mass is far below that and far above sampling noise.
  CHECK(with > 100 * without);
  CHECK(with > 0.05);
}

TEST_CASE("per-channel mean offsets show as channel means", "[synth]") {
  SynthSpec s = small_spec();
  s.tokens = 4096;
  s.mean_offset = 2.0;
  const SynthLayer l = synthesize_layer(s, 0);
  double sum_sq = 0;
  for (int c = 0; c < s.dim; ++c) {
    double mean = 0;
    for (int t = 0; t < s.tokens; ++t) mean += l.k(0, t, c);
    mean /= s.tokens;
    sum_sq += mean * mean;
  }
  const double rms = std::sqrt(sum_sq / s.dim);
  // Offsets are N(0, 2^2) per channel: over 64 channels their rms is 2 within ~18% (chi, 64 dof,
  // 2 sigma), and the content signal adds a channel-mean noise of ~0.2.
  CHECK(rms > 1.5);
  CHECK(rms < 2.5);
}

TEST_CASE("bad synth specs are one clear error each", "[synth][errors]") {
  SynthSpec s = small_spec();
  s.q_heads = 5;
  CHECK(error_text([&] { validate(s); }).find("q_heads/kv_heads = 5/2") != std::string::npos);
  s = small_spec();
  s.tokens = 131073;
  CHECK(error_text([&] { validate(s); }).find("tokens = 131073: expected 1..131072") != std::string::npos);
  s = small_spec();
  s.outlier_channels = 32;
  CHECK(error_text([&] { validate(s); }).find("outlier_channels = 32: expected fewer than half of dim 64") != std::string::npos);
  s = small_spec();
  s.outlier_channels = 2;
  s.outlier_ratio = 1.01;
  CHECK(error_text([&] { (void)synthesize_layer(s, 0); }).find("is below the spread of the ordinary channels") != std::string::npos);
}
