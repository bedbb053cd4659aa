#pragma once
// Seeded synthetic Q/K/V with the structure real models show: a token-correlated content signal
// (so attention decays with distance, and RoPE matters), RoPE, per-channel mean offsets, attention
// sinks, and K channel outliers of an exact requested magnitude. Deterministic for a spec on every
// platform (its own generator and normal sampler, no library distributions).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"
#include "kernels/formats/tensor.hpp"

namespace qattn {

struct SynthSpec {
  int q_heads = 8, kv_heads = 2, tokens = 4096, dim = 128, layers = 1;
  std::uint64_t seed = 1;
  double locality = 0.98;     // token-to-token correlation of the shared content signal, in [0, 1)
  double q_std = 1.0;         // query scale: larger sharpens attention
  double rope_base = 10000;   // 0 = no RoPE
  double mean_offset = 0.0;   // std of K's and V's per-channel mean offsets
  int sinks = 0;              // sink tokens at the start of the sequence
  double sink_logit = 8.0;    // how much every query's logit to a sink token is raised (nats)
  int outlier_channels = 0;   // K channels scaled up to outlier_ratio x the median channel's absmax
  double outlier_ratio = 1.0;
  bool causal = true;
  int window = 0;
  FormatId dtype = FormatId::fp16;  // storage type of the file
};

// Throws std::invalid_argument naming the field and what was expected.
void validate(const SynthSpec& spec);

struct SynthLayer {
  TensorF q, k, v;
  std::vector<int> outlier_channels;  // sorted
};

SynthLayer synthesize_layer(const SynthSpec& spec, int layer);

// The spec as a one-line JSON object, for provenance.
std::string to_json(const SynthSpec& spec);

}  // namespace qattn
