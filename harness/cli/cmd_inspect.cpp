// `qattn inspect FILE`: what a dump holds, and each layer's K channel outliers.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "harness/cli/commands.hpp"
#include "harness/io/dataset_file.hpp"
#include "reference/channel_stats.hpp"

namespace qattn::cli {

namespace {

// A channel ratio over a median channel that is all zeros has no bound: said in words, not "inf".
std::string ratio_text(double r) { return std::isfinite(r) ? fmt::format("{:.1f}", r) : "unbounded (median channel 0)"; }

}  // namespace

Action add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Summarize a Q/K/V dump (schema qattn-dump/1) and its K channel outliers");
  auto file = std::make_shared<std::string>();
  auto tokens = std::make_shared<int>(0);
  cmd->add_option("file", *file, "HDF5 dump")->required();
  cmd->add_option("--tokens", *tokens, "Outlier statistics over the first N tokens (default: all)")->check(CLI::NonNegativeNumber);
  return [file, tokens]() {
    const DatasetInfo info = open_dataset(*file);
    const auto get = [&](const char* k) { return info.attrs.at(k).text(); };
    fmt::print("file        {}\nschema      {}\nmodel       {}\nweights     {}\ntext        {}\ntokens      {}{}\n", info.path,
               get("schema"), get("model"), get("weights"), get("text_source"), info.n_tokens,
               info.has_tokens ? " (token ids stored)" : "");
    fmt::print("created     {} by {}\n", get("created_at"), get("created_by"));
    const LayerInfo& first = info.layers.front();
    fmt::print("layers      {} ({} .. {})\nheads       {} query, {} KV (GQA group {})\nhead dim    {}\ndtype       {}\n",
               info.layers.size(), first.name, info.layers.back().name, first.q_heads, first.kv_heads,
               first.q_heads / first.kv_heads, first.dim, name_of(first.dtype));
    fmt::print("attributes\n");
    for (const auto& [k, v] : info.attrs) fmt::print("  {} = {}\n", k, v.text());
    fmt::print("K channel outliers per layer: channel absmax over the median channel's, per KV head\n");
    fmt::print("{:>6} {:>6} {:>7} {:>10} {:>9}  {}\n", "layer", "causal", "window", "scale", "worst", "per KV head: ratio (channel, int8 levels left to the median channel)");
    for (const LayerInfo& l : info.layers) {
      SliceRequest req;
      req.tokens = *tokens;
      const LayerSlice s = load_layer(info, l.name, req);
      std::string heads;
      double worst = 0;
      for (int h = 0; h < s.problem.k.heads; ++h) {
        const ChannelOutliers o = channel_outliers(s.problem.k, h);
        worst = std::max(worst, o.ratio);
        heads += fmt::format("{}{} (ch {}, {:.1f})", h ? ", " : "", ratio_text(o.ratio), o.max_channel, o.int8_levels_median);
      }
      fmt::print("{:>6} {:>6} {:>7} {:>10.6g} {:>9}  {}\n", l.name, l.causal ? "yes" : "no", l.sliding_window, l.softmax_scale,
                 std::isfinite(worst) ? fmt::format("{:.1f}x", worst) : std::string("unbounded"), heads);
    }
    for (const LayerInfo& l : info.layers) {  // the attention variants (schema 2), where a layer has one
      if (l.v_dim != l.dim) fmt::print("layer {}: V's head dim is {} (Q and K: {})\n", l.name, l.v_dim, l.dim);
      if (!l.alibi.empty()) {
        const auto [lo, hi] = std::minmax_element(l.alibi.begin(), l.alibi.end());
        fmt::print("layer {}: ALiBi, a slope per query head, {:.6g} .. {:.6g}\n", l.name, *lo, *hi);
      }
      if (l.chunk > 0) fmt::print("layer {}: chunked attention, chunks of {} tokens\n", l.name, l.chunk);
      if (l.softcap > 0) fmt::print("layer {}: logits soft-capped at {:.6g} (c tanh(s / c))\n", l.name, l.softcap);
      if (!l.sinks.empty()) {
        const auto [lo, hi] = std::minmax_element(l.sinks.begin(), l.sinks.end());
        fmt::print("layer {}: a sink logit per query head, {:.6g} .. {:.6g}\n", l.name, *lo, *hi);
      }
    }
    return 0;
  };
}

}  // namespace qattn::cli
