// `qattn synth`: a seeded synthetic dump in schema qattn-dump/1.
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>

#include "datasets/synth/synth.hpp"
#include "harness/cli/commands.hpp"
#include "harness/io/dataset_file.hpp"
#include "kernels/formats/registry.hpp"

namespace qattn::cli {

namespace {
std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

Action add_synth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a seeded synthetic Q/K/V dump (schema qattn-dump/1)");
  struct Opts {
    SynthSpec spec;
    std::string out, dtype = "fp16";
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  SynthSpec& s = o->spec;
  cmd->add_option("--out", o->out, "Output HDF5 file")->required();
  cmd->add_option("--q-heads", s.q_heads, "Query heads")->capture_default_str();
  cmd->add_option("--kv-heads", s.kv_heads, "KV heads (q-heads must be a multiple)")->capture_default_str();
  cmd->add_option("--tokens", s.tokens, "Tokens (up to 131072)")->capture_default_str();
  cmd->add_option("--dim", s.dim, "Head dim (even)")->capture_default_str();
  cmd->add_option("--layers", s.layers, "Layers, each with its own seed stream")->capture_default_str();
  cmd->add_option("--seed", s.seed, "Seed")->capture_default_str()->check(kSeed);
  cmd->add_option("--locality", s.locality, "Token-to-token correlation of the content signal [0, 1)")->capture_default_str();
  cmd->add_option("--q-std", s.q_std, "Query scale (sharpens attention)")->capture_default_str();
  cmd->add_option("--rope-base", s.rope_base, "RoPE base (0 = no RoPE)")->capture_default_str();
  cmd->add_option("--mean-offset", s.mean_offset, "Std of K's and V's per-channel mean offsets")->capture_default_str();
  cmd->add_option("--sinks", s.sinks, "Attention-sink tokens at the start")->capture_default_str();
  cmd->add_option("--sink-logit", s.sink_logit, "Logit boost of every query toward the sinks (nats)")->capture_default_str();
  cmd->add_option("--outlier-channels", s.outlier_channels, "K outlier channels")->capture_default_str();
  cmd->add_option("--outlier-ratio", s.outlier_ratio, "Their absmax over the median channel's")->capture_default_str();
  cmd->add_option("--causal", s.causal, "Causal (1) or not (0)")->capture_default_str();
  cmd->add_option("--window", s.window, "Sliding window (0 = none)")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Storage dtype: fp16, bf16, fp32")->capture_default_str();
  cmd->add_flag("--force", o->force, "Overwrite an existing file");
  return [o]() {
    o->spec.dtype = parse_format(o->dtype, "synth --dtype");
    validate(o->spec);
    if (!o->force && std::filesystem::exists(o->out)) {
      throw std::invalid_argument("synth: " + o->out + " exists; pass --force to overwrite it");
    }
    std::vector<LayerToWrite> layers;
    for (int l = 0; l < o->spec.layers; ++l) {
      SynthLayer sl = synthesize_layer(o->spec, l);
      LayerToWrite w;
      w.name = std::to_string(l);
      w.q = std::move(sl.q);
      w.k = std::move(sl.k);
      w.v = std::move(sl.v);
      w.causal = o->spec.causal;
      w.sliding_window = o->spec.window;
      w.softmax_scale = 1.0 / std::sqrt(static_cast<double>(o->spec.dim));
      w.rope = o->spec.rope_base > 0 ? "applied" : "none";
      layers.push_back(std::move(w));
    }
    const std::map<std::string, AttrValue> attrs{
        {"schema", attr(schema_for(layers))},
        {"model", attr(std::string("synthetic"))},
        {"weights", attr(std::string("none (synthetic tensors)"))},
        {"text_source", attr(std::string("none (synthetic tensors)"))},
        {"n_tokens", attr(static_cast<long long>(o->spec.tokens))},
        {"created_by", attr(std::string("qattn synth"))},
        {"created_at", attr(utc_now_iso8601())},
        {"synth_spec", attr(to_json(o->spec))},
    };
    write_dataset(o->out, attrs, layers, o->spec.dtype);
    fmt::print("wrote {}: {} layer(s), {} query / {} KV heads, {} tokens, head dim {}, {}\n", o->out, o->spec.layers,
               o->spec.q_heads, o->spec.kv_heads, o->spec.tokens, o->spec.dim, name_of(o->spec.dtype));
    return 0;
  };
}

}  // namespace qattn::cli
