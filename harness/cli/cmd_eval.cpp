// `qattn eval`: one recipe on one selection of a dump, against the float64 reference.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <iostream>

#include "harness/cli/commands.hpp"
#include "harness/experiment/aggregate.hpp"
#include "harness/experiment/backend.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/unit_score.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "harness/io/rows_text.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

namespace qattn::cli {

namespace {

struct EvalOptions {
  std::string data, layer, recipe, rows = "all", backend = "emulate";
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
  cmd->add_option("--seed", o->seed, "Seed of the KL row sample")->capture_default_str()->check(kSeed);
  cmd->add_option("--backend", o->backend, "emulate (the bit-faithful emulator on this CPU) or gpu (the GPU kernels; no P rows, so no KL)")
      ->capture_default_str();
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

// A field as a table cell: SQNR with two decimals, the cosine with six, the rest in scientific
// notation; a field not measured as "-".
std::string cell(const nlohmann::json& v, const std::string& name) {
  if (v.is_null()) return "-";
  const double x = report::as_double(v);
  if (name == "sqnr_db") return db_text(x);
  return name == "cosine" ? fmt::format("{:.6f}", x) : fmt::format("{:.3e}", x);
}

int run_eval(const EvalOptions* o) {
  const Recipe recipe = recipe_from_string(o->recipe);
  const backend::Backend be = backend::parse(o->backend, "eval --backend");
  const DatasetInfo info = open_dataset(o->data);
  SliceRequest req;
  req.heads = o->heads;
  req.tokens = o->tokens;
  LayerSlice slice = load_layer(info, o->layer, req);
  Problem& p = slice.problem;
  p.rows = rows_from_string(o->rows, "eval --rows");
  const int n = p.q.tokens;
  if (const std::string why = backend::not_covered(be, p, recipe); !why.empty()) {
    throw std::invalid_argument("eval --backend gpu: no GPU kernel covers the recipe on this layer: " + why);
  }
  std::vector<int> kl_rows;
  if (o->kl_rows > 0 && recipe.softmax == SoftmaxKind::float_online) {
    kl_rows = RowSelection::sample_of(std::min(o->kl_rows, n), o->seed).resolve(n);
  }
  ReferenceOptions ro;
  ro.prob_rows = kl_rows;
  // Progress on stderr, a line per step (stdout holds only the result).
  const auto t0 = std::chrono::steady_clock::now();
  const auto step = [&](const std::string& what) {
    if (!o->quiet) fmt::print(stderr, "eval: {} ({:.1f} s)\n", what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  step(fmt::format("layer {}: {} heads x {} rows x {} keys; float64 reference", o->layer, p.q.heads, p.rows.resolve(n).size(), p.k.tokens));
  const ReferenceResult ref = reference_attention(p, ro);
  step(be == backend::Backend::gpu ? "running the recipe on the GPU" : "emulating the recipe");
  const backend::Output run = backend::run(be, p, recipe, kl_rows);
  step("metrics");
  const std::vector<double> out(run.out.data.begin(), run.out.data.end());
  const UnitScore score = score_unit(ref.out.data, out, slice.q_heads, {&ref.probs, run.has_probs ? &run.probs : nullptr,
                                                                                  static_p_flush_threshold(recipe.p), !p.sinks.empty()});

  nlohmann::json heads = nlohmann::json::array();
  DbMean head_sqnr;  // the recipe-level aggregate over this unit's heads
  for (int h = 0; h < p.q.heads; ++h) {
    nlohmann::json j;
    put_fields(j, score.heads[static_cast<std::size_t>(h)]);
    j["head"] = slice.q_heads[h];
    heads.push_back(j);
    head_sqnr.add(score.heads[static_cast<std::size_t>(h)].error.sqnr_db);
  }
  nlohmann::json pooled;
  put_fields(pooled, score.pooled);
  nlohmann::json out_json = {{"data", o->data},
                             {"model", info.attrs.at("model").s},
                             {"layer", report::layer_json(o->layer)},
                             {"tokens", n},
                             {"rows", ref.rows.size()},
                             {"causal", p.causal},
                             {"window", p.window},
                             // The attention variants (null or 0: none), so a result says what it measured.
                             {"softcap", p.softcap},
                             {"chunk", p.chunk},
                             {"sinks", p.sinks.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.sinks)},
                             {"alibi", p.alibi.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.alibi)},
                             {"v_dim", p.v.dim},
                             {"recipe", to_string(recipe)},
                             {"backend", backend::name(be)},
                             {"kernel", run.kernel},
                             {"kl_rows", kl_rows.size()},
                             {"heads", heads},
                             {"pooled", pooled},
                             {"mean_head_sqnr_db", report::num(head_sqnr.mean())}};
  if (o->json) {
    std::cout << out_json.dump(2) << "\n";
    return 0;
  }
  std::string variants;
  if (p.softcap > 0) variants += fmt::format(", soft-cap {:g}", p.softcap);
  if (!p.sinks.empty()) variants += ", sink logits";
  if (!p.alibi.empty()) variants += ", ALiBi";
  if (p.chunk > 0) variants += fmt::format(", chunks of {}", p.chunk);
  if (p.v.dim != p.q.dim) variants += fmt::format(", V head dim {}", p.v.dim);
  fmt::print("{} layer {} ({}), {} tokens, {} rows, {}{}\nrecipe: {}\nkernel: {}\n", o->data, o->layer, info.attrs.at("model").s, n,
             ref.rows.size(), p.causal ? "causal" : "full", variants, to_string(recipe), run.kernel);
  std::vector<std::string> names;
  for (const ErrorField& f : kErrorFields) names.emplace_back(f.name);
  for (const RowField& f : kRowFields) names.emplace_back(f.name);
  std::string header = fmt::format("{:>6}", "head");
  for (const std::string& name : names) header += fmt::format(" {:>{}}", name, std::max<std::size_t>(10, name.size()));
  fmt::print("{}\n", header);
  const auto row = [&](const std::string& label, const nlohmann::json& j) {
    std::string line = fmt::format("{:>6}", label);
    for (const std::string& name : names) line += fmt::format(" {:>{}}", cell(j.at(name), name), std::max<std::size_t>(10, name.size()));
    fmt::print("{}\n", line);
  };
  for (const auto& j : heads) row(std::to_string(j["head"].get<int>()), j);
  row("pooled", pooled);
  fmt::print("mean of per-head SQNR: {} dB; KL/TV over {} sampled rows per head{}\n", db_text(head_sqnr.mean()), kl_rows.size(),
             !run.has_probs ? " (none: the GPU kernels hand back no P)"
                            : kl_rows.empty() ? " (none: integer softmax or --kl-rows 0)" : "");
  return 0;
}

}  // namespace

}  // namespace qattn::cli
