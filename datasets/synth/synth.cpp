#include "datasets/synth/synth.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "kernels/formats/registry.hpp"
#include "kernels/problem/problem.hpp"

namespace qattn {

namespace {

// splitmix64 with a Box-Muller normal sampler: the same numbers everywhere for a seed.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_); }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * std::numbers::pi * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("synth spec: " + field + " " + what);
}

// Rotate pairs (c, c + d/2) by position * base^(-2c/d): the rotate-half RoPE of Llama and Gemma.
void apply_rope(std::vector<double>& x, int position, int d, double base) {
  const int half = d / 2;
  for (int c = 0; c < half; ++c) {
    const double theta = position * std::pow(base, -2.0 * c / d);
    const double cs = std::cos(theta), sn = std::sin(theta);
    const double a = x[c], b = x[c + half];
    x[c] = a * cs - b * sn;
    x[c + half] = a * sn + b * cs;
  }
}

}  // namespace

void validate(const SynthSpec& s) {
  if (s.q_heads <= 0 || s.kv_heads <= 0 || s.q_heads % s.kv_heads != 0) {
    bad("q_heads/kv_heads", "= " + std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + ": expected positive, q_heads a multiple of kv_heads");
  }
  if (s.tokens <= 0 || s.tokens > 131072) bad("tokens", "= " + std::to_string(s.tokens) + ": expected 1..131072");
  if (s.dim <= 0 || s.dim % 2 != 0 || s.dim > 1024) bad("dim", "= " + std::to_string(s.dim) + ": expected an even head dim up to 1024");
  if (s.layers <= 0 || s.layers > 1024) bad("layers", "= " + std::to_string(s.layers) + ": expected 1..1024");
  if (!(s.locality >= 0 && s.locality < 1)) bad("locality", "= " + std::to_string(s.locality) + ": expected [0, 1)");
  if (!(s.q_std > 0) || !std::isfinite(s.q_std)) bad("q_std", "must be positive");
  if (!(s.rope_base == 0 || s.rope_base > 1)) bad("rope_base", "= " + std::to_string(s.rope_base) + ": expected 0 (none) or > 1");
  if (!(s.mean_offset >= 0) || !std::isfinite(s.mean_offset)) bad("mean_offset", "must be >= 0");
  if (s.sinks < 0 || s.sinks > s.tokens) bad("sinks", "= " + std::to_string(s.sinks) + ": expected 0..tokens");
  if (!std::isfinite(s.sink_logit)) bad("sink_logit", "must be finite");
  if (s.outlier_channels < 0 || 2 * s.outlier_channels >= s.dim) {
    bad("outlier_channels", "= " + std::to_string(s.outlier_channels) + ": expected fewer than half of dim " + std::to_string(s.dim));
  }
  if (s.outlier_channels > 0 && !(s.outlier_ratio >= 1) ) bad("outlier_ratio", "= " + std::to_string(s.outlier_ratio) + ": expected >= 1");
  if (s.window < 0) bad("window", "must be >= 0");
  if (s.dtype != FormatId::fp16 && s.dtype != FormatId::bf16 && s.dtype != FormatId::fp32) {
    bad("dtype", std::string("= ") + name_of(s.dtype) + ": expected fp16, bf16 or fp32");
  }
}

SynthLayer synthesize_layer(const SynthSpec& s, int layer) {
  validate(s);
  const int d = s.dim, n = s.tokens, group = s.q_heads / s.kv_heads;
  Rng rng(s.seed * 0x100000001B3ull + static_cast<std::uint64_t>(layer) * 0x9E3779B97F4A7C15ull + 17);
  SynthLayer out;
  out.q = TensorF(s.q_heads, n, d);
  out.k = TensorF(s.kv_heads, n, d);
  out.v = TensorF(s.kv_heads, n, d);

  // Outlier channels: distinct, chosen by the seed.
  std::vector<int> channels(d);
  for (int c = 0; c < d; ++c) channels[c] = c;
  for (int i = 0; i < s.outlier_channels; ++i) std::swap(channels[i], channels[i + static_cast<int>(rng.next() % static_cast<std::uint64_t>(d - i))]);
  out.outlier_channels.assign(channels.begin(), channels.begin() + s.outlier_channels);
  std::sort(out.outlier_channels.begin(), out.outlier_channels.end());

  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double innov = std::sqrt(1.0 - s.locality * s.locality);
  // Sinks: every query carries alpha * u, each sink key beta * u, so q.k gains alpha * beta.
  const double alpha = 2.0, beta = s.sink_logit / (scale * alpha);

  std::vector<double> content(d), x(d), offset_k(d), offset_v(d), u(d);
  for (int g = 0; g < s.kv_heads; ++g) {
    for (int c = 0; c < d; ++c) {
      offset_k[c] = s.mean_offset * rng.normal();
      offset_v[c] = s.mean_offset * rng.normal();
      u[c] = rng.normal();
      content[c] = rng.normal();
    }
    double norm = 0;
    for (double e : u) norm += e * e;
    for (double& e : u) e /= std::sqrt(norm);

    for (int t = 0; t < n; ++t) {
      if (t > 0)
        for (int c = 0; c < d; ++c) content[c] = s.locality * content[c] + innov * rng.normal();
      // K: content plus noise, rotated, offset, sink direction on sink tokens.
      for (int c = 0; c < d; ++c) x[c] = content[c] + 0.5 * rng.normal();
      if (s.rope_base > 0) apply_rope(x, t, d, s.rope_base);
      for (int c = 0; c < d; ++c) {
        double kv = x[c] + offset_k[c];
        if (t < s.sinks) kv += beta * u[c];
        out.k(g, t, c) = static_cast<float>(kv);
        out.v(g, t, c) = static_cast<float>(rng.normal() + offset_v[c]);
      }
      // Q of each query head in the group: its own noise around the shared content.
      for (int j = 0; j < group; ++j) {
        const int h = g * group + j;
        for (int c = 0; c < d; ++c) x[c] = content[c] + rng.normal();
        if (s.rope_base > 0) apply_rope(x, t, d, s.rope_base);
        for (int c = 0; c < d; ++c) out.q(h, t, c) = static_cast<float>(s.q_std * (x[c] + alpha * u[c]));
      }
    }

    // K outliers, exact: with the outlier channels on top, the median of all d channel absmaxes is
    // set by the ordinary channels alone (fewer than half are outliers), so scaling each outlier
    // channel to ratio x that median makes max / median exactly the ratio.
    if (s.outlier_channels > 0) {
      std::vector<double> absmax(d, 0.0), ordinary;
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < d; ++c) absmax[c] = std::max(absmax[c], static_cast<double>(std::fabs(out.k(g, t, c))));
      for (int c = 0; c < d; ++c)
        if (!std::binary_search(out.outlier_channels.begin(), out.outlier_channels.end(), c)) ordinary.push_back(absmax[c]);
      std::sort(ordinary.begin(), ordinary.end());
      const double median = d % 2 ? ordinary[d / 2] : 0.5 * (ordinary[d / 2 - 1] + ordinary[d / 2]);
      const double target = s.outlier_ratio * median;
      if (target < ordinary.back()) {
        bad("outlier_ratio", "= " + std::to_string(s.outlier_ratio) + " is below the spread of the ordinary channels (max/median " +
                                 std::to_string(ordinary.back() / median) + " in layer " + std::to_string(layer) + ", KV head " +
                                 std::to_string(g) + "); ask for at least that");
      }
      for (int c : out.outlier_channels) {
        const double f = target / absmax[c];
        for (int t = 0; t < n; ++t) out.k(g, t, c) = static_cast<float>(out.k(g, t, c) * f);
      }
    }
  }
  return out;
}

std::string to_json(const SynthSpec& s) {
  std::ostringstream o;
  o.precision(17);
  o << "{\"q_heads\": " << s.q_heads << ", \"kv_heads\": " << s.kv_heads << ", \"tokens\": " << s.tokens
    << ", \"dim\": " << s.dim << ", \"layers\": " << s.layers << ", \"seed\": " << s.seed << ", \"locality\": " << s.locality
    << ", \"q_std\": " << s.q_std << ", \"rope_base\": " << s.rope_base << ", \"mean_offset\": " << s.mean_offset
    << ", \"sinks\": " << s.sinks << ", \"sink_logit\": " << s.sink_logit << ", \"outlier_channels\": " << s.outlier_channels
    << ", \"outlier_ratio\": " << s.outlier_ratio << ", \"causal\": " << (s.causal ? "true" : "false")
    << ", \"window\": " << s.window << ", \"dtype\": \"" << name_of(s.dtype) << "\"}";
  return o.str();
}

}  // namespace qattn
