// `qattn eval`: one recipe on one selection of a dump, against the float64 reference.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <iostream>

#include "harness/cli/commands.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "harness/io/rows_text.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

namespace qattn::cli {

namespace {

nlohmann::json metrics_json(const ErrorMetrics& m, double kl, double tv) {
  const auto num = [](double x) { return std::isinf(x) ? nlohmann::json(x > 0 ? "inf" : "-inf") : nlohmann::json(x); };
  return {{"sqnr_db", num(m.sqnr_db)}, {"rel_l2", m.rel_l2}, {"rel_l1", m.rel_l1}, {"cosine", m.cosine},
          {"max_abs", m.max_abs},      {"kl_mean", kl},      {"tv_mean", tv}};
}

struct EvalOptions {
  std::string data, layer, recipe, rows = "all";
  std::vector<int> heads;
  int tokens = 0, kl_rows = 16;
  std::uint64_t seed = 1;
  bool json = false, quiet = false;
};

int run_eval(const EvalOptions* o);

}  // namespace

Action add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate one recipe on one layer of a dump against the float64 reference");
  auto o = std::make_shared<EvalOptions>();
  cmd->add_option("--data", o->data, "HDF5 dump (schema qattn-dump/1)")->required();
  cmd->add_option("--layer", o->layer, "Layer name, e.g. 15")->required();
  cmd->add_option("--recipe", o->recipe, "One-line recipe, e.g. \"q=int8/token k=int8/token ksmooth=global acc.qk=exact\"")->required();
  cmd->add_option("--heads", o->heads, "Query heads (default: all)")->delimiter(',');
  cmd->add_option("--tokens", o->tokens, "First N tokens (causal layers: the context length; default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--rows", o->rows, "Query rows: all, range:BEGIN:END or sample:COUNT:SEED")->capture_default_str();
  cmd->add_option("--kl-rows", o->kl_rows, "Sampled rows per head for KL and total variation (0 = none)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the KL row sample")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress on stderr");
  return [o]() {
    try {
      return run_eval(o.get());
    } catch (const NumericFailure& f) {  // a result exists but is no number to print
      throw std::runtime_error(o->data + ": layer " + o->layer + ", recipe '" + o->recipe + "': no result to report: " + f.what());
    }
  };
}

namespace {

int run_eval(const EvalOptions* o) {
  const Recipe recipe = recipe_from_string(o->recipe);
  const DatasetInfo info = open_dataset(o->data);
  SliceRequest req;
  req.heads = o->heads;
  req.tokens = o->tokens;
  LayerSlice slice = load_layer(info, o->layer, req);
  Problem& p = slice.problem;
  p.rows = rows_from_string(o->rows, "eval --rows");
  const int n = p.q.tokens, d = p.q.dim;
  std::vector<int> kl_rows;
  if (o->kl_rows > 0 && recipe.softmax == SoftmaxKind::float_online) {
    kl_rows = RowSelection::sample_of(std::min(o->kl_rows, n), o->seed).resolve(n);
  }
  ReferenceOptions ro;
  ro.prob_rows = kl_rows;
  EmulatorOptions eo;
  eo.prob_rows = kl_rows;
  // Progress on stderr, a line per step (stdout holds only the result).
  const auto t0 = std::chrono::steady_clock::now();
  const auto step = [&](const char* what) {
    if (!o->quiet) fmt::print(stderr, "eval: {} ({:.1f} s)\n", what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  step(fmt::format("layer {}: {} heads x {} rows x {} keys; float64 reference", o->layer, p.q.heads, p.rows.resolve(n).size(), p.k.tokens).c_str());
  const ReferenceResult ref = reference_attention(p, ro);
  step("emulating the recipe");
  const EmulatorResult emu = emulate(p, recipe, eo);
  step("metrics");

  const std::size_t per_head = ref.rows.size() * static_cast<std::size_t>(d);
  std::vector<double> all_ref(ref.out.data), all_emu(emu.out.data.begin(), emu.out.data.end());
  nlohmann::json heads = nlohmann::json::array();
  double sum_db = 0, kl_all = 0, tv_all = 0;
  std::vector<std::array<double, 2>> kl_tv(p.q.heads, {0.0, 0.0});
  for (int h = 0; h < p.q.heads; ++h) {
    for (std::size_t k = 0; k < kl_rows.size(); ++k) {
      const std::span<const double> pr(ref.probs.row(h, static_cast<int>(k)), n), pe(emu.probs.row(h, static_cast<int>(k)), n);
      const RowDivergence dv = row_divergence(pr, pe);
      kl_tv[h][0] += dv.kl / static_cast<double>(kl_rows.size());
      kl_tv[h][1] += dv.total_variation / static_cast<double>(kl_rows.size());
    }
    const ErrorMetrics m = compare(std::span(all_ref).subspan(h * per_head, per_head), std::span(all_emu).subspan(h * per_head, per_head));
    sum_db += m.sqnr_db;
    kl_all += kl_tv[h][0] / p.q.heads;
    tv_all += kl_tv[h][1] / p.q.heads;
    nlohmann::json j = metrics_json(m, kl_tv[h][0], kl_tv[h][1]);
    j["head"] = slice.q_heads[h];
    heads.push_back(j);
  }
  if (!std::isfinite(kl_all) || !std::isfinite(tv_all)) throw NumericFailure("the recipe's attention weights give a non-finite KL or total variation");
  const ErrorMetrics pooled = compare(all_ref, all_emu);
  nlohmann::json out = {{"data", o->data},
                        {"model", info.attrs.at("model").s},
                        {"layer", report::layer_json(o->layer)},
                        {"tokens", n},
                        {"rows", ref.rows.size()},
                        {"causal", p.causal},
                        {"window", p.window},
                        {"recipe", to_string(recipe)},
                        {"kl_rows", kl_rows.size()},
                        {"heads", heads},
                        {"pooled", metrics_json(pooled, kl_all, tv_all)},
                        {"mean_head_sqnr_db", std::isinf(sum_db) ? nlohmann::json("inf") : nlohmann::json(sum_db / p.q.heads)}};
  if (o->json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  fmt::print("{} layer {} ({}), {} tokens, {} rows, {}\nrecipe: {}\n", o->data, o->layer, info.attrs.at("model").s, n,
             ref.rows.size(), p.causal ? "causal" : "full", to_string(recipe));
  fmt::print("{:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "head", "sqnr_db", "rel_l2", "rel_l1", "cosine",
             "max_abs", "kl_mean", "tv_mean");
  const auto row = [](const std::string& name, const nlohmann::json& j) {
    const auto num = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : fmt::format("{:.2f}", v.get<double>()); };
    fmt::print("{:>6} {:>9} {:>10.3e} {:>10.3e} {:>10.6f} {:>10.3e} {:>10.3e} {:>10.3e}\n", name, num(j["sqnr_db"]),
               j["rel_l2"].get<double>(), j["rel_l1"].get<double>(), j["cosine"].get<double>(), j["max_abs"].get<double>(),
               j["kl_mean"].get<double>(), j["tv_mean"].get<double>());
  };
  for (const auto& j : heads) row(std::to_string(j["head"].get<int>()), j);
  row("pooled", out["pooled"]);
  fmt::print("mean of per-head SQNR: {:.2f} dB; KL/TV over {} sampled rows per head{}\n", sum_db / p.q.heads, kl_rows.size(),
             kl_rows.empty() ? " (none: integer softmax or --kl-rows 0)" : "");
  return 0;
}

}  // namespace

}  // namespace qattn::cli
