#include "harness/experiment/runner.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <sstream>

#include "harness/experiment/backend.hpp"
#include "harness/experiment/progress.hpp"
#include "harness/experiment/report_run.hpp"
#include "harness/experiment/run_report.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/report_shards.hpp"
#include "harness/experiment/unit_score.hpp"
#include "harness/parallel/ranks.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "reference/attention.hpp"
#include "reference/channel_stats.hpp"
#include "reference/metrics.hpp"
#include "reference/statistics.hpp"


namespace qattn {

namespace fs = std::filesystem;
using nlohmann::json;

using namespace report;

namespace {

// A unit's relative cost for the plan and the ETA: each evaluated query row of a head attends to up
// to c keys (all c rows, or the sampled rows). Computed once, in the plan; a finished unit's step
// counts the plan's number, so the ETA reaches 0 at the last unit.
double unit_cost(int c, int heads, int rows) { return static_cast<double>(rows > 0 ? std::min(rows, c) : c) * c * heads; }

std::string unit_key(const std::string& layer, int ctx, const std::string& recipe) {
  return layer + "|" + std::to_string(ctx) + "|" + recipe;
}

std::uint64_t mix(std::uint64_t seed, const std::string& layer, int ctx) {
  std::uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (char c : layer) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return (h ^ static_cast<std::uint64_t>(ctx)) * 0x100000001b3ull;
}

// Why the output cannot be scored ("" when every element is finite): names the head, row and channel.
std::string non_finite_output(const std::vector<double>& out, int rows, int d, const std::vector<int>& heads, const std::vector<int>& row_ids) {
  std::size_t bad = 0, first = out.size();
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i])) bad += 1, first = std::min(first, i);
  if (bad == 0) return "";
  const std::size_t per_head = static_cast<std::size_t>(rows) * d;
  return fmt::format("the output has {} non-finite value(s) of {} (first: head {}, row {}, channel {} is {}): every P of a row flushed to "
                     "zero (0 / 0) or an overflow",
                     bad, out.size(), heads[first / per_head], row_ids[(first % per_head) / d], first % d, std::isnan(out[first]) ? "NaN" : "Inf");
}

template <class P>
void record_failure(const fs::path& dir, const std::string& layer, int ctx, const std::string& recipe, const std::string& backend,
                    const std::string& why, P& progress, double cost) {
  append_unit(dir / "failed.jsonl", {json{{"layer", layer_json(layer)}, {"context", ctx}, {"recipe", recipe}, {"backend", backend}, {"reason", why}}});
  fmt::print(stderr, "qattn: warning: layer {} context {} recipe '{}' failed: {}\n", layer, ctx, recipe, why);
  progress.step(fmt::format("layer {} ctx {} {}: failed", layer, ctx, recipe), cost);
}

// What the experiment selects in its dump, checked before any work.
struct Selection {
  DatasetInfo info;
  std::vector<std::string> layers;
  std::vector<int> contexts;
  backend::Backend backend = backend::Backend::emulate;
};

Selection check_experiment(const Experiment& e, const RunOptions& opt) {
  Selection s;
  need_utf8_path(e.file + ": the experiment file", e.file);
  need_utf8_path(e.file + ": dataset", e.dataset);
  need_utf8_path(e.file + ": output", e.output);
  s.backend = backend::parse(opt.backend, "run --backend");
  std::error_code exists_ec;
  if (!fs::exists(e.dataset, exists_ec)) {
    std::string shown = e.dataset.substr(0, std::min<std::size_t>(e.dataset.size(), 80));
    while (shown.size() < e.dataset.size() && !shown.empty() && (static_cast<unsigned char>(e.dataset[shown.size()]) & 0xC0) == 0x80) shown.pop_back();
    if (shown.size() < e.dataset.size()) shown += "...";
    throw std::invalid_argument(e.file + ": dataset: '" + shown + "': " + (exists_ec ? exists_ec.message() : std::string("no such file")));
  }
  s.info = open_dataset(e.dataset);
  s.layers = e.layers;
  if (s.layers.empty())
    for (const LayerInfo& l : s.info.layers) s.layers.push_back(l.name);
  for (const std::string& l : s.layers) (void)s.info.layer(l);
  const LayerInfo& first = s.info.layer(s.layers.front());
  for (int h : e.heads)
    if (h < 0 || h >= first.q_heads) throw std::invalid_argument(e.file + ": selection.heads: head " + std::to_string(h) + " outside 0.." + std::to_string(first.q_heads - 1) + " of " + e.dataset);
  s.contexts = e.contexts.empty() ? std::vector<int>{s.info.n_tokens} : e.contexts;
  for (int c : s.contexts)
    if (c > s.info.n_tokens) throw std::invalid_argument(e.file + ": selection.contexts: " + std::to_string(c) + " tokens asked; " + e.dataset + " has " + std::to_string(s.info.n_tokens));
  if (s.backend == backend::Backend::gpu && ranks::sharded()) {
    const std::string gpu = backend::select_gpu(ranks::local_rank());
    if (!opt.quiet) fmt::print(stderr, "run: {}: {}\n", ranks::label(), gpu);
  }
  return s;
}

// The single-process order of the logs: units by layer, context, recipe; statistics by layer, context.
RowOrder log_order(const Experiment& e, const Selection& s) {
  auto unit_pos = std::make_shared<std::map<std::string, long long>>(), slice_pos = std::make_shared<std::map<std::string, long long>>();
  for (const std::string& l : s.layers)
    for (int c : s.contexts) {
      slice_pos->emplace(l + "|" + std::to_string(c), static_cast<long long>(slice_pos->size()));
      for (const auto& [name, r] : e.recipes) {
        (void)r;
        unit_pos->emplace(unit_key(l, c, name), static_cast<long long>(unit_pos->size()));
      }
    }
  return [unit_pos, slice_pos](const json& row, bool stats) {
    const std::string slice = layer_name(row.at("layer")) + "|" + std::to_string(row.at("context").get<long long>());
    const auto& pos = stats ? *slice_pos : *unit_pos;
    const auto it = pos.find(stats ? slice : slice + "|" + row.at("recipe").get<std::string>());
    return it == pos.end() ? std::numeric_limits<long long>::max() : it->second;
  };
}

// Rank 0: the folder claimed, an earlier run's shards merged, config.json with its provenance.
std::unique_ptr<ReportRun> open_report(const Experiment& e, const RunOptions& opt, const Selection& s, const RowOrder& order) {
  auto report = std::make_unique<ReportRun>(e.output, existing_for("run", opt.force, opt.resume), true);
  json recipes = json::object();
  for (const auto& [name, r] : e.recipes) recipes[name] = to_string(r);
  json p_formats = json::array();
  for (const auto& p : e.p_formats) p_formats.push_back({{"format", p.label}, {"threshold", p.threshold}});
  json sampled = json::object();
  for (const std::string& l : s.layers)
    for (int c : s.contexts) {
      if (e.rows > 0 && e.rows < c) sampled[l + "@" + std::to_string(c)] = RowSelection::sample_of(e.rows, mix(e.seed, l, c)).resolve(c);
      if (e.kl_rows > 0) sampled["kl " + l + "@" + std::to_string(c)] = RowSelection::sample_of(std::min(e.kl_rows, c), mix(e.seed + 1, l, c)).resolve(c);
    }
  json config = dataset_provenance(e.dataset, s.info.attrs.at("model").s);
  config.update(json{{"name", e.name}, {"experiment_file", e.file}, {"layers", s.layers}, {"heads", e.heads}, {"contexts", s.contexts}, {"rows", e.rows},
                     {"kl_rows", e.kl_rows}, {"seed", e.seed}, {"sampled_rows", sampled}, {"recipes", recipes}, {"p_formats", p_formats},
                     {"backend", opt.backend}, {"sweep_overrides", e.sweep_overrides}, {"ranks", ranks::size()}});
  // --resume completes the same experiment only: what defines the units and their numbers must agree.
  report->refuse_changed(config, {"dataset_fnv1a64", "layers", "heads", "contexts", "rows", "kl_rows", "seed", "p_formats", "backend", "recipes"},
                         "the experiment changed since this report was written ({}); --resume would mix old and new results: use --force to "
                         "start over, or another 'output'");
  // What an interrupted sharded run left in shards/ joins the report's logs before the plan is made.
  if (const int merged = merge_logs(report->dir(), order); merged > 0 && !opt.quiet) fmt::print(stderr, "run: merged {} shard logs an earlier run left\n", merged);
  report->write_config(config, opt.command_line);
  return report;
}

// This rank's share of what the report lacks, the same plan on every rank.
struct Plan {
  std::size_t pending = 0, done = 0;   // units to run (every rank's) and units already in the report
  std::set<std::string> units, stats;  // this rank's unit keys and statistics slices
  std::map<std::string, double> cost;  // unit key -> its planned cost (this rank's)
  double total = 0;                    // this rank's planned cost
};

Plan plan_units(const Experiment& e, const Selection& s) {
  const fs::path dir(e.output);
  std::set<std::string> done;
  for (const char* log : kUnitLogs)
    for (const json& r : read_units(dir / log, false)) done.insert(unit_key(layer_name(r["layer"]), r["context"], r["recipe"]));
  std::set<std::string> stats_done;
  for (const json& st : read_units(dir / kStatsLog, true)) stats_done.insert(layer_name(st["layer"]) + "|" + std::to_string(st["context"].get<int>()));
  struct Pending {
    std::string key, slice;
    double cost;
  };
  std::vector<Pending> pending;
  for (const std::string& l : s.layers) {
    const int heads = e.heads.empty() ? s.info.layer(l).q_heads : static_cast<int>(e.heads.size());
    for (int c : s.contexts)
      for (const auto& [name, r] : e.recipes) {
        (void)r;
        if (done.count(unit_key(l, c, name))) continue;
        pending.push_back({unit_key(l, c, name), l + "|" + std::to_string(c), unit_cost(c, heads, e.rows)});
      }
  }
  // Each rank takes a contiguous run of the plan of about equal cost (rows x keys x heads):
  // a unit goes to the rank whose share holds its cost's midpoint. Contiguous runs keep a layer and
  // context on one rank, so few float64 references are computed twice.
  Plan plan;
  plan.pending = pending.size();
  plan.done = done.size();
  std::map<std::string, int> slice_owner;
  std::vector<double> costs;
  for (const Pending& u : pending) costs.push_back(u.cost);
  const std::vector<int> owners = ranks::cost_shares(costs, ranks::size());
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const Pending& u = pending[i];
    slice_owner.emplace(u.slice, owners[i]);
    if (owners[i] == ranks::rank()) plan.units.insert(u.key), plan.total += u.cost, plan.cost[u.key] = u.cost;
  }
  long long slice_index = 0;
  for (const std::string& l : s.layers)
    for (int c : s.contexts) {
      const std::string slice = l + "|" + std::to_string(c);
      const auto it = slice_owner.find(slice);
      const int owner = it != slice_owner.end() ? it->second : static_cast<int>(slice_index % ranks::size());
      if (!stats_done.count(slice) && owner == ranks::rank()) plan.stats.insert(slice);
      ++slice_index;
    }
  return plan;
}

// The slice's reference statistics: P's mass per decade and the mass each P format flushes over the
// KL rows, and the channel outliers of Q (this head) and of K and V (its KV head), raw and after
// subtracting each channel's mean over the context.
std::vector<json> slice_statistics(const Experiment& e, const std::string& l, int c, const LayerSlice& slice, const ReferenceResult& ref,
                                   const std::vector<int>& kl_rows) {
  const Problem& p = slice.problem;
  const int hq = p.q.heads, n = p.k.tokens;
  std::vector<json> unit;
  for (int h = 0; h < hq; ++h) {
    std::array<double, kDecades> mean{};
    for (std::size_t k = 0; k < kl_rows.size(); ++k) {
      const auto b = mass_per_decade(std::span<const double>(ref.probs.row(h, static_cast<int>(k)), n));
      for (int q = 0; q < kDecades; ++q) mean[q] += b[q] / static_cast<double>(kl_rows.size());
    }
    const json base = {{"layer", layer_json(l)}, {"head", slice.q_heads[h]}, {"context", c}};
    json dj = base;
    dj["kind"] = "decades";
    dj["mass"] = json::array();
    for (const double x : mean) dj["mass"].push_back(num(x));
    unit.push_back(dj);
    for (const auto& pf : e.p_formats) {
      double m = 0;
      for (std::size_t k = 0; k < kl_rows.size(); ++k)
        m += mass_flushed(std::span<const double>(ref.probs.row(h, static_cast<int>(k)), n), pf.threshold) / static_cast<double>(kl_rows.size());
      json fj = base;
      fj["kind"] = "flushed";
      fj["p_format"] = pf.label;
      fj["threshold"] = pf.threshold;
      fj["mass"] = num(m);
      unit.push_back(fj);
    }
    const int kh = h * p.k.heads / hq;
    for (const auto& [tname, t, th] : {std::tuple{"q", &p.q, h}, std::tuple{"k", &p.k, kh}, std::tuple{"v", &p.v, kh}}) {
      const ChannelOutliers raw = channel_outliers(*t, th), sm = channel_outliers(*t, th, 0, true);
      json oj = base;
      oj["kind"] = "outliers";
      oj["tensor"] = tname;
      oj["ratio_raw"] = num(raw.ratio);
      oj["ratio_smoothed"] = num(sm.ratio);
      oj["levels_raw"] = num(raw.int8_levels_median);
      oj["levels_smoothed"] = num(sm.int8_levels_median);
      unit.push_back(oj);
    }
  }
  return unit;
}

// One unit: the recipe on the slice's backend, scored against the float64 reference into the rows
// of results.jsonl, or into not_covered.jsonl / failed.jsonl with the reason.
void run_unit(const RunOptions& opt, backend::Backend be, const std::string& l, int c, const std::string& name, const Recipe& recipe,
              const LayerSlice& slice, const ReferenceResult& ref, const std::vector<int>& kl_rows, const fs::path& logs, Progress& progress,
              double cost) {
  const Problem& p = slice.problem;
  if (const std::string reason = backend::not_covered(be, p, recipe); !reason.empty()) {
    append_unit(logs / "not_covered.jsonl", {json{{"layer", layer_json(l)}, {"context", c}, {"recipe", name}, {"backend", opt.backend}, {"reason", reason}}});
    progress.step(fmt::format("layer {} ctx {} {}: not covered by the GPU kernels", l, c, name), cost);
    return;
  }
  backend::Output run;
  try {
    run = backend::run(be, p, recipe, kl_rows);
  } catch (const NumericFailure& f) {
    record_failure(logs, l, c, name, opt.backend, f.what(), progress, cost);
    return;
  }
  const std::vector<double> out(run.out.data.begin(), run.out.data.end());
  if (const std::string why = non_finite_output(out, static_cast<int>(ref.rows.size()), p.v.dim, slice.q_heads, ref.rows); !why.empty()) {
    record_failure(logs, l, c, name, opt.backend, why, progress, cost);
    return;
  }
  // A unit whose reference or output has no metrics (an all-zero head) is a failed unit.
  UnitScore score;
  try {
    score = score_unit(ref.out.data, out, slice.q_heads, {&ref.probs, run.has_probs ? &run.probs : nullptr, static_p_flush_threshold(recipe.p), !p.sinks.empty()});
  } catch (const NumericFailure& f) {
    record_failure(logs, l, c, name, opt.backend, f.what(), progress, cost);
    return;
  }
  std::vector<json> unit;
  for (int h = 0; h < p.q.heads; ++h) {
    json row = {{"layer", layer_json(l)}, {"head", slice.q_heads[h]}, {"context", c}, {"recipe", name}, {"backend", opt.backend},
                {"recipe_line", to_string(recipe)}, {"kernel", run.kernel}, {"rows", static_cast<int>(ref.rows.size())}};
    put_fields(row, score.heads[static_cast<std::size_t>(h)]);
    unit.push_back(std::move(row));
  }
  append_unit(logs / "results.jsonl", std::move(unit));
  progress.step(fmt::format("layer {} ctx {} {}: {}", l, c, name,
                            std::isinf(score.pooled.error.sqnr_db) ? std::string("exact") : fmt::format("{:.2f} dB", score.pooled.error.sqnr_db)),
                cost);
}

// This rank's share of the plan: each (layer, context) loaded once, its float64 reference computed
// once, its statistics and its units logged into `logs` (the report, or this rank's shard).
void run_plan(const Experiment& e, const RunOptions& opt, const Selection& s, const Plan& plan, const fs::path& logs, Progress& progress) {
  for (const std::string& l : s.layers)
    for (int c : s.contexts) {
      bool any = plan.stats.count(l + "|" + std::to_string(c)) > 0;
      for (const auto& [name, r] : e.recipes) any |= plan.units.count(unit_key(l, c, name)) > 0;
      if (!any) continue;
      SliceRequest req;
      req.heads = e.heads;
      req.tokens = c;
      LayerSlice slice = load_layer(s.info, l, req);
      if (e.rows > 0 && e.rows < c) slice.problem.rows = RowSelection::sample_of(e.rows, mix(e.seed, l, c));
      const std::vector<int> kl_rows = e.kl_rows > 0 ? RowSelection::sample_of(std::min(e.kl_rows, c), mix(e.seed + 1, l, c)).resolve(c) : std::vector<int>{};
      ReferenceOptions ro;
      ro.prob_rows = kl_rows;
      const ReferenceResult ref = reference_attention(slice.problem, ro);
      if (plan.stats.count(l + "|" + std::to_string(c))) append_unit(logs / kStatsLog, slice_statistics(e, l, c, slice, ref, kl_rows));
      for (const auto& [name, recipe] : e.recipes) {
        if (plan.units.count(unit_key(l, c, name))) run_unit(opt, s.backend, l, c, name, recipe, slice, ref, kl_rows, logs, progress, plan.cost.at(unit_key(l, c, name)));
      }
    }
}

}  // namespace

// Every rank checks the experiment (cheap, and each needs the dataset's structure); rank 0 alone
// claims the folder and merges old shards; then each rank runs its share of the pending units into
// its shard, and rank 0 merges them into the report. One process does the same without shards.
void run_experiment(const Experiment& e, const RunOptions& opt) {
  Selection s;
  ranks::checked([&] { s = check_experiment(e, opt); });
  const RowOrder order = log_order(e, s);
  std::unique_ptr<ReportRun> report;  // rank 0's, for the whole run: a second writer is refused, not interleaved
  ranks::on_rank0([&] { report = open_report(e, opt, s, order); });
  const Plan plan = plan_units(e, s);
  if (ranks::rank() == 0) {
    fmt::print("{}: {} layers x {} contexts x {} recipes; {} units to run{}{}\n", e.name, s.layers.size(), s.contexts.size(), e.recipes.size(),
               plan.pending, plan.done == 0 ? "" : fmt::format(" ({} already in the report)", plan.done),
               ranks::sharded() ? fmt::format(" over {} ranks", ranks::size()) : "");
  }
  // Rank 0 shows its own share's progress; the other ranks work quietly (their warnings still print).
  Progress progress(plan.total, plan.units.size(), opt.quiet || ranks::rank() != 0, opt.progress_lines);
  const fs::path logs = ranks::sharded() ? shard_dir(e.output, ranks::rank()) : fs::path(e.output);
  ranks::checked([&] {
    if (ranks::sharded()) fs::create_directories(logs);
    run_plan(e, opt, s, plan, logs, progress);
  });
  ranks::on_rank0([&] {
    const auto t0 = std::chrono::steady_clock::now();
    const int merged = merge_logs(report->dir(), order);
    if (merged > 0 && !opt.quiet) {
      fmt::print(stderr, "run: merged {} shard logs of {} ranks into the report in {:.3f} s\n", merged, ranks::size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    write_run_report(e, *report, opt.summary);
  });
}

}  // namespace qattn
