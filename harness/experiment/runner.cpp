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
#include "harness/experiment/report_folder.hpp"
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

// --resume completes the same experiment only: the stored config must agree on what defines the
// units and their numbers (dataset, selection, seed, recipes); otherwise old and new rows would mix.
void refuse_changed_experiment(const fs::path& dir, const json& now) {
  if (!fs::exists(dir / "config.json")) return;
  const json before = json::parse(std::ifstream(dir / "config.json"), nullptr, false);
  if (!before.is_object() || (before.contains("recipes") && !before["recipes"].is_object())) {
    throw std::invalid_argument((dir / "config.json").string() + ": not a report's config (a JSON object with recipes); the report cannot be resumed (use --force to replace it)");
  }
  std::vector<std::string> changed;
  for (const char* k : {"dataset_fnv1a64", "layers", "heads", "contexts", "rows", "kl_rows", "seed", "p_formats", "backend"}) {
    if (before.value(k, json()) != now[k]) changed.push_back(k);
  }
  const json rb = before.value("recipes", json::object());
  for (const auto& [name, line] : now["recipes"].items()) {
    if (rb.contains(name) && rb[name] != line) changed.push_back("recipes." + name + " (" + (rb[name].is_string() ? rb[name].get<std::string>() : rb[name].dump()) + " -> " + line.get<std::string>() + ")");
  }
  for (const auto& [name, line] : rb.items()) {
    (void)line;
    if (!now["recipes"].contains(name)) changed.push_back("recipes." + name + " (removed)");
  }
  if (changed.empty()) return;
  std::string list;
  for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
  throw std::invalid_argument(dir.string() + ": the experiment changed since this report was written (" + list +
                              "); --resume would mix old and new results: use --force to start over, or another 'output'");
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

void write_outputs(const Experiment& e, const fs::path& dir, bool summary) {
  const std::vector<json> rows = read_log(dir / "results.jsonl");
  const std::vector<json> stats = read_log(dir / "stats.jsonl");
  // results.csv: one row per (layer, head, context, recipe, backend).
  // The swept keys become columns (empty for named recipes), so a sweep reads as a table.
  std::string varied_header;
  for (const std::string& k : e.varied_keys) varied_header += "," + csv_text(k);
  std::string csv = "layer,head,context,recipe,backend,kernel," + fields_header() + ",rows" + varied_header + "\n";
  for (const json& r : rows) {
    std::string varied_cells;
    const auto it = e.varied.find(r["recipe"].get<std::string>());
    for (const std::string& k : e.varied_keys) {
      std::string v;
      if (it != e.varied.end())
        for (const auto& [kk, vv] : it->second)
          if (kk == k) v = vv;
      varied_cells += "," + csv_text(v);
    }
    csv += fmt::format("{},{},{},{},{},{},{},{}{}\n", csv_text(layer_name(r["layer"])), r["head"].get<int>(), r["context"].get<int>(),
                       csv_text(r["recipe"].get<std::string>()), csv_text(r["backend"].get<std::string>()),
                       csv_text(r.value("kernel", std::string("emulator"))), fields_cells(r), r["rows"].get<int>(), varied_cells);
  }
  write_atomic(dir / "results.csv", csv);

  // summary.md: per recipe, over its (layer, head, context) rows.
  std::string md = "# " + md_text(e.name) + "\n\nPer recipe over all (layer, head, context) rows: SQNR in dB (mean of rows and worst row), "
                   "relative L2 (mean), KL(P_ref || P) per row (mean), and the reference's row mass at or below the recipe's P "
                   "flush threshold (mean; static P formats only).\n\n"
                   "| recipe | rows | mean SQNR dB | worst SQNR dB | mean rel L2 | mean KL | mass flushed |\n|---|---|---|---|---|---|---|\n";
  for (const auto& [name, recipe] : e.recipes) {
    (void)recipe;
    double sum_db = 0, worst = INFINITY, l2 = 0, kl = 0, fl = 0;
    int count = 0, fl_count = 0, kl_count = 0;
    for (const json& r : rows) {
      if (r["recipe"] != name) continue;
      const double db = as_double(r["sqnr_db"]);
      sum_db += db;
      worst = std::min(worst, db);
      l2 += r["rel_l2"].get<double>();
      if (!r["kl_mean"].is_null()) kl += r["kl_mean"].get<double>(), ++kl_count;
      if (!r["p_mass_flushed_ref"].is_null()) fl += r["p_mass_flushed_ref"].get<double>(), ++fl_count;
      ++count;
    }
    if (count == 0) continue;
    md += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.3e} | {} | {} |\n", md_code(name), count, sum_db / count, worst, l2 / count,
                      kl_count ? fmt::format("{:.3e}", kl / kl_count) : "-", fl_count ? fmt::format("{:.4f}", fl / fl_count) : "-");
  }
  // The same mean SQNR split by layer and by context (pooled over heads and the other axis).
  for (const char* axis : {"layer", "context"}) {
    std::vector<std::string> keys;
    std::map<std::pair<std::string, std::string>, std::pair<double, int>> cell;  // (recipe, key) -> (sum dB, rows)
    for (const json& r : rows) {
      const std::string k = r[axis].is_string() ? r[axis].get<std::string>() : std::to_string(r[axis].get<int>());
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      auto& c = cell[{r["recipe"].get<std::string>(), k}];
      c.first += as_double(r["sqnr_db"]);
      c.second += 1;
    }
    if (keys.size() < 2) continue;
    md += fmt::format("\nMean SQNR dB by {} (over heads{}):\n\n| recipe |", axis, std::string(axis) == "layer" ? " and contexts" : " and layers");
    for (const auto& k : keys) md += " " + std::string(axis) + " " + md_text(k) + " (dB) |";
    md += "\n|---|" + [&] { std::string x; for (std::size_t i = 0; i < keys.size(); ++i) x += "---|"; return x; }() + "\n";
    for (const auto& [name, recipe] : e.recipes) {
      (void)recipe;
      std::string line = fmt::format("| {} |", md_code(name));
      bool any = false;
      for (const auto& k : keys) {
        const auto it = cell.find({name, k});
        any |= it != cell.end();
        line += it == cell.end() ? " - |" : fmt::format(" {:.2f} |", it->second.first / it->second.second);
      }
      if (any) md += line + "\n";
    }
  }
  if (!e.sweep_overrides.empty()) {
    md += "\nSweep: ";
    for (std::size_t i = 0; i < e.sweep_overrides.size(); ++i) md += (i ? "; " : "") + md_text(e.sweep_overrides[i]);
    md += ".\n";
  }
  const std::vector<json> failed = read_log(dir / "failed.jsonl");
  if (!failed.empty()) {
    md += "\nFailed (no metrics: the result is not a number the lab reports):\n\n";
    for (const json& u : failed) {
      md += fmt::format("- {}, layer {}, context {}: {}\n", md_code(u["recipe"].get<std::string>()), md_text(layer_name(u["layer"])),
                        u["context"].get<int>(), md_text(u["reason"].get<std::string>()));
    }
  }
  const std::vector<json> uncovered = read_log(dir / "not_covered.jsonl");
  if (!uncovered.empty()) {
    md += "\nNot covered by the GPU kernels (not run, never silently emulated):\n\n";
    std::set<std::string> seen;
    for (const json& u : uncovered)
      if (seen.insert(u["recipe"].get<std::string>()).second) md += fmt::format("- {}: {}\n", md_code(u["recipe"].get<std::string>()), md_text(u["reason"].get<std::string>()));
  }
  write_atomic(dir / "summary.md", md);

  // Figure data.
  std::string decades = "layer,head,context,decade_low,mass\n", flushed = "layer,head,context,p_format,threshold,mass_flushed\n",
              outliers = "layer,head,context,tensor,channel_ratio_raw,channel_ratio_smoothed,int8_levels_median_raw,int8_levels_median_smoothed\n";
  static const char* lows[kDecades] = {"1e-1", "1e-2", "1e-3", "1e-4", "1e-5", "1e-6", "1e-7", "1e-8", "0"};
  for (const json& s : stats) {
    const std::string key = fmt::format("{},{},{}", csv_text(layer_name(s["layer"])), s["head"].get<int>(), s["context"].get<int>());
    if (s["kind"] == "decades") {
      for (int k = 0; k < kDecades; ++k) decades += fmt::format("{},{},{}\n", key, lows[k], as_double(s["mass"][k]));
    } else if (s["kind"] == "flushed") {
      flushed += fmt::format("{},{},{},{}\n", key, csv_text(s["p_format"].get<std::string>()), s["threshold"].get<double>(), as_double(s["mass"]));
    } else if (s["kind"] == "outliers") {
      outliers += fmt::format("{},{},{},{},{},{}\n", key, csv_text(s["tensor"].get<std::string>()), as_double(s["ratio_raw"]),
                              as_double(s["ratio_smoothed"]), as_double(s["levels_raw"]), as_double(s["levels_smoothed"]));
    }
  }
  fs::create_directories(dir / "figures");
  write_atomic(dir / "figures" / "p_mass_per_decade.csv", decades);
  write_atomic(dir / "figures" / "mass_flushed.csv", flushed);
  write_atomic(dir / "figures" / "channel_outliers.csv", outliers);
  if (!summary) return;
  fmt::print("\n{}", md);
  const bool drawn = report::render_figures(dir.string(), report::ReportKind::run);
  fmt::print("\nreport: {} (summary.md, results.csv, results.jsonl, config.json, figures/)\n", dir.string());
  if (!drawn) report::throw_figures_missing(dir.string());
}

}  // namespace

void run_experiment(const Experiment& e, const RunOptions& opt) {
  // Every rank checks the experiment (cheap, and each needs the dataset's structure); rank 0 alone
  // prepares the folder and merges old shards; then each rank runs its share of the pending units
  // into its shard, and rank 0 merges them into the report. One process does the same without shards.
  DatasetInfo info;
  std::vector<std::string> layers;
  std::vector<int> contexts;
  const fs::path dir(e.output);
  backend::Backend be = backend::Backend::emulate;
  std::exception_ptr err;
  try {
    need_utf8_path(e.file + ": the experiment file", e.file);
    need_utf8_path(e.file + ": dataset", e.dataset);
    need_utf8_path(e.file + ": output", e.output);
    be = backend::parse(opt.backend, "run --backend");
    // Everything checkable is checked before any work.
    std::error_code exists_ec;
    if (!fs::exists(e.dataset, exists_ec)) {
      std::string shown = e.dataset.substr(0, std::min<std::size_t>(e.dataset.size(), 80));
      while (shown.size() < e.dataset.size() && !shown.empty() && (static_cast<unsigned char>(e.dataset[shown.size()]) & 0xC0) == 0x80) shown.pop_back();
      if (shown.size() < e.dataset.size()) shown += "...";
      throw std::invalid_argument(e.file + ": dataset: '" + shown + "': " + (exists_ec ? exists_ec.message() : std::string("no such file")));
    }
    info = open_dataset(e.dataset);
    layers = e.layers;
    if (layers.empty())
      for (const LayerInfo& l : info.layers) layers.push_back(l.name);
    for (const std::string& l : layers) (void)info.layer(l);
    const LayerInfo& first = info.layer(layers.front());
    for (int h : e.heads)
      if (h < 0 || h >= first.q_heads) throw std::invalid_argument(e.file + ": selection.heads: head " + std::to_string(h) + " outside 0.." + std::to_string(first.q_heads - 1) + " of " + e.dataset);
    contexts = e.contexts.empty() ? std::vector<int>{info.n_tokens} : e.contexts;
    for (int c : contexts)
      if (c > info.n_tokens) throw std::invalid_argument(e.file + ": selection.contexts: " + std::to_string(c) + " tokens asked; " + e.dataset + " has " + std::to_string(info.n_tokens));

    if (be == backend::Backend::gpu && ranks::sharded()) {
      const std::string gpu = backend::select_gpu(ranks::local_rank());
      if (!opt.quiet) fmt::print(stderr, "run: {}: {}\n", ranks::label(), gpu);
    }
  } catch (...) {
    err = std::current_exception();
  }
  ranks::agree(err);

  // The single-process order of the logs: units by layer, context, recipe; statistics by layer, context.
  std::map<std::string, long long> unit_pos, slice_pos;
  for (const std::string& l : layers)
    for (int c : contexts) {
      slice_pos.emplace(l + "|" + std::to_string(c), static_cast<long long>(slice_pos.size()));
      for (const auto& [name, r] : e.recipes) {
        (void)r;
        unit_pos.emplace(unit_key(l, c, name), static_cast<long long>(unit_pos.size()));
      }
    }
  const RowOrder order = [&](const json& row, bool stats) {
    const std::string slice = layer_name(row.at("layer")) + "|" + std::to_string(row.at("context").get<long long>());
    const auto& pos = stats ? slice_pos : unit_pos;
    const auto it = pos.find(stats ? slice : slice + "|" + row.at("recipe").get<std::string>());
    return it == pos.end() ? std::numeric_limits<long long>::max() : it->second;
  };

  std::unique_ptr<FolderLock> lock;  // rank 0's, for the whole run: a second writer is refused, not interleaved
  ranks::on_rank0([&] {
    if (opt.resume && opt.force) throw std::invalid_argument("run: --resume and --force exclude each other (complete the report, or replace it)");
    lock = claim_report_folder(dir, opt.force ? Existing::replace : opt.resume ? Existing::resume : Existing::refuse,
                               "pass --resume to complete it or --force to replace it");
    // config.json: the resolved experiment with provenance.
    json recipes = json::object();
    for (const auto& [name, r] : e.recipes) recipes[name] = to_string(r);
    json p_formats = json::array();
    for (const auto& p : e.p_formats) p_formats.push_back({{"format", p.label}, {"threshold", p.threshold}});
    json sampled = json::object();
    for (const std::string& l : layers)
      for (int c : contexts) {
        if (e.rows > 0 && e.rows < c) sampled[l + "@" + std::to_string(c)] = RowSelection::sample_of(e.rows, mix(e.seed, l, c)).resolve(c);
        if (e.kl_rows > 0) sampled["kl " + l + "@" + std::to_string(c)] = RowSelection::sample_of(std::min(e.kl_rows, c), mix(e.seed + 1, l, c)).resolve(c);
      }
    const json config = {{"name", e.name}, {"experiment_file", e.file}, {"dataset", e.dataset},
                         {"dataset_fnv1a64", fmt::format("{:016x}", fnv1a_file(e.dataset))}, {"model", info.attrs.at("model").s},
                         {"layers", layers}, {"heads", e.heads}, {"contexts", contexts}, {"rows", e.rows}, {"kl_rows", e.kl_rows},
                         {"seed", e.seed}, {"sampled_rows", sampled}, {"recipes", recipes}, {"p_formats", p_formats},
                         {"backend", opt.backend}, {"git_commit", git_commit()}, {"build_type", QATTN_BUILD_TYPE},
                         {"date", now_utc()}, {"command_line", opt.command_line}, {"sweep_overrides", e.sweep_overrides},
                         {"ranks", ranks::size()}};
    if (opt.resume) refuse_changed_experiment(dir, config);
    // What an interrupted sharded run left in shards/ joins the report's logs before the plan is made.
    if (const int merged = merge_logs(dir, order); merged > 0 && !opt.quiet) fmt::print(stderr, "run: merged {} shard logs an earlier run left\n", merged);
    write_atomic(dir / "config.json", config.dump(2) + "\n");

  });

  // The plan, the same on every rank: what the report lacks, in the single-process order.
  std::set<std::string> done;
  for (const char* log : kUnitLogs)
    for (const json& r : read_units(dir / log, false)) done.insert(unit_key(layer_name(r["layer"]), r["context"], r["recipe"]));
  std::set<std::string> stats_done;
  for (const json& s : read_units(dir / kStatsLog, true)) stats_done.insert(layer_name(s["layer"]) + "|" + std::to_string(s["context"].get<int>()));
  struct Pending {
    std::string key, slice;
    double cost;
  };
  std::vector<Pending> pending;
  for (const std::string& l : layers) {
    const int heads = e.heads.empty() ? info.layer(l).q_heads : static_cast<int>(e.heads.size());
    for (int c : contexts)
      for (const auto& [name, r] : e.recipes) {
        (void)r;
        if (done.count(unit_key(l, c, name))) continue;
        pending.push_back({unit_key(l, c, name), l + "|" + std::to_string(c), unit_cost(c, heads, e.rows)});
      }
  }
  // Each rank takes a contiguous run of the plan of about equal cost (rows x keys x heads):
  // a unit goes to the rank whose share holds its cost's midpoint. Contiguous runs keep a layer and
  // context on one rank, so few float64 references are computed twice.
  std::set<std::string> my_units, my_stats;
  std::map<std::string, double> planned_cost;  // unit key -> cost
  std::map<std::string, int> slice_owner;
  double my_cost = 0;
  std::vector<double> costs;
  for (const Pending& u : pending) costs.push_back(u.cost);
  const std::vector<int> owners = ranks::cost_shares(costs, ranks::size());
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const Pending& u = pending[i];
    const int owner = owners[i];
    slice_owner.emplace(u.slice, owner);
    if (owner == ranks::rank()) my_units.insert(u.key), my_cost += u.cost, planned_cost[u.key] = u.cost;
  }
  long long slice_index = 0;
  for (const std::string& l : layers)
    for (int c : contexts) {
      const std::string slice = l + "|" + std::to_string(c);
      const auto it = slice_owner.find(slice);
      const int owner = it != slice_owner.end() ? it->second : static_cast<int>(slice_index % ranks::size());
      if (!stats_done.count(slice) && owner == ranks::rank()) my_stats.insert(slice);
      ++slice_index;
    }
  if (ranks::rank() == 0) {
    fmt::print("{}: {} layers x {} contexts x {} recipes; {} units to run{}{}\n", e.name, layers.size(), contexts.size(), e.recipes.size(),
               pending.size(), done.empty() ? "" : fmt::format(" ({} already in the report)", done.size()),
               ranks::sharded() ? fmt::format(" over {} ranks", ranks::size()) : "");
  }
  // Rank 0 shows its own share's progress; the other ranks work quietly (their warnings still print).
  Progress progress(my_cost, my_units.size(), opt.quiet || ranks::rank() != 0, opt.progress_lines);
  const fs::path logs = ranks::sharded() ? shard_dir(dir, ranks::rank()) : dir;

  err = nullptr;
  try {
    if (ranks::sharded()) fs::create_directories(logs);
    for (const std::string& l : layers)
      for (int c : contexts) {
        bool any = my_stats.count(l + "|" + std::to_string(c)) > 0;
        for (const auto& [name, r] : e.recipes) any |= my_units.count(unit_key(l, c, name)) > 0;
        if (!any) continue;
        SliceRequest req;
        req.heads = e.heads;
        req.tokens = c;
        LayerSlice slice = load_layer(info, l, req);
        Problem& p = slice.problem;
        if (e.rows > 0 && e.rows < c) p.rows = RowSelection::sample_of(e.rows, mix(e.seed, l, c));
        const std::vector<int> kl_rows = e.kl_rows > 0 ? RowSelection::sample_of(std::min(e.kl_rows, c), mix(e.seed + 1, l, c)).resolve(c) : std::vector<int>{};
        ReferenceOptions ro;
        ro.prob_rows = kl_rows;
        const ReferenceResult ref = reference_attention(p, ro);
        const int hq = p.q.heads, d = p.q.dim, n = p.k.tokens;

        if (my_stats.count(l + "|" + std::to_string(c))) {
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
            // Channel outliers of Q (this head) and of K and V (its KV head), raw and after
            // subtracting each channel's mean over the context.
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
          append_unit(logs / kStatsLog, std::move(unit));
        }

        for (const auto& [name, recipe] : e.recipes) {
          if (!my_units.count(unit_key(l, c, name))) continue;
          if (const std::string reason = backend::not_covered(be, p, recipe); !reason.empty()) {
            append_unit(logs / "not_covered.jsonl", {json{{"layer", layer_json(l)}, {"context", c}, {"recipe", name}, {"backend", opt.backend}, {"reason", reason}}});
            progress.step(fmt::format("layer {} ctx {} {}: not covered by the GPU kernels", l, c, name), planned_cost.at(unit_key(l, c, name)));
            continue;
          }
          backend::Output run;
          try {
            run = backend::run(be, p, recipe, kl_rows);
          } catch (const NumericFailure& f) {
            record_failure(logs, l, c, name, opt.backend, f.what(), progress, planned_cost.at(unit_key(l, c, name)));
            continue;
          }
          const std::vector<double> out(run.out.data.begin(), run.out.data.end());
          if (const std::string why = non_finite_output(out, static_cast<int>(ref.rows.size()), d, slice.q_heads, ref.rows); !why.empty()) {
            record_failure(logs, l, c, name, opt.backend, why, progress, planned_cost.at(unit_key(l, c, name)));
            continue;
          }
          // A unit whose reference or output has no metrics (an all-zero head) is a failed unit.
          UnitScore score;
          try {
            score = score_unit(ref.out.data, out, slice.q_heads,
                               {&ref.probs, run.has_probs ? &run.probs : nullptr, static_p_flush_threshold(recipe.p)});
          } catch (const NumericFailure& f) {
            record_failure(logs, l, c, name, opt.backend, f.what(), progress, planned_cost.at(unit_key(l, c, name)));
            continue;
          }
          std::vector<json> unit;
          for (int h = 0; h < hq; ++h) {
            json row = {{"layer", layer_json(l)}, {"head", slice.q_heads[h]}, {"context", c}, {"recipe", name}, {"backend", opt.backend},
                        {"recipe_line", to_string(recipe)}, {"kernel", run.kernel}, {"rows", static_cast<int>(ref.rows.size())}};
            put_fields(row, score.heads[static_cast<std::size_t>(h)]);
            unit.push_back(std::move(row));
          }
          append_unit(logs / "results.jsonl", std::move(unit));
          progress.step(fmt::format("layer {} ctx {} {}: {}", l, c, name,
                                    std::isinf(score.pooled.error.sqnr_db) ? std::string("exact") : fmt::format("{:.2f} dB", score.pooled.error.sqnr_db)),
                        planned_cost.at(unit_key(l, c, name)));
        }
      }
  } catch (...) {
    err = std::current_exception();
  }
  ranks::agree(err);
  ranks::on_rank0([&] {
    const auto t0 = std::chrono::steady_clock::now();
    const int merged = merge_logs(dir, order);
    if (merged > 0 && !opt.quiet) {
      fmt::print(stderr, "run: merged {} shard logs of {} ranks into the report in {:.3f} s\n", merged, ranks::size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    write_outputs(e, dir, opt.summary);
  });
}

}  // namespace qattn
