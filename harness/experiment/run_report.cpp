#include "harness/experiment/run_report.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "harness/experiment/aggregate.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/unit_score.hpp"
#include "reference/statistics.hpp"

namespace qattn {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace report;

namespace {

// results.csv: one row per (layer, head, context, recipe, backend).
std::string results_csv(const Experiment& e, const std::vector<json>& rows) {
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
  return csv;

}

// A recipe's rows grouped by one axis ("layer" or "context"), pooled over the others: the axis's
// values in first-seen order and, per (recipe, value), the aggregates the summary's tables and the
// figures draw (SQNR by aggregate.hpp's mean; relative L2 and KL by their plain means).
struct ByAxis {
  struct Cell {
    DbMean sqnr;
    double rel_l2 = 0, kl = 0;
    int kl_count = 0;
  };
  std::vector<std::string> keys;
  std::map<std::pair<std::string, std::string>, Cell> cells;  // (recipe, axis value)
};

ByAxis group_by(const std::vector<json>& rows, const char* axis) {
  ByAxis g;
  for (const json& r : rows) {
    const std::string k = r[axis].is_string() ? r[axis].get<std::string>() : std::to_string(r[axis].get<int>());
    if (std::find(g.keys.begin(), g.keys.end(), k) == g.keys.end()) g.keys.push_back(k);
    ByAxis::Cell& c = g.cells[{r["recipe"].get<std::string>(), k}];
    c.sqnr.add(as_double(r["sqnr_db"]));
    c.rel_l2 += r["rel_l2"].get<double>();
    if (!r["kl_mean"].is_null()) c.kl += r["kl_mean"].get<double>(), ++c.kl_count;
  }
  return g;
}

// summary.md: per recipe, over its (layer, head, context) rows.
std::string summary_md(const Experiment& e, const std::vector<json>& rows, const fs::path& dir) {
  std::string md = "# " + md_text(e.name) + "\n\nPer recipe over all (layer, head, context) rows: SQNR in dB (mean of rows and worst row), "
                   "relative L2 (mean), KL(P_ref || P) per row (mean), and the reference's row mass at or below the recipe's P "
                   "flush threshold (mean; static P formats only).\n\n"
                   "| recipe | rows | mean SQNR dB | worst SQNR dB | mean rel L2 | mean KL | mass flushed |\n|---|---|---|---|---|---|---|\n";
  for (const auto& [name, recipe] : e.recipes) {
    (void)recipe;
    DbMean sqnr;
    double l2 = 0, kl = 0, fl = 0;
    int fl_count = 0, kl_count = 0;
    for (const json& r : rows) {
      if (r["recipe"] != name) continue;
      sqnr.add(as_double(r["sqnr_db"]));
      l2 += r["rel_l2"].get<double>();
      if (!r["kl_mean"].is_null()) kl += r["kl_mean"].get<double>(), ++kl_count;
      if (!r["p_mass_flushed_ref"].is_null()) fl += r["p_mass_flushed_ref"].get<double>(), ++fl_count;
    }
    const int count = sqnr.count();
    if (count == 0) continue;
    md += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.3e} | {} | {} |\n", md_code(name), count, sqnr.mean(), sqnr.worst(), l2 / count,
                      kl_count ? fmt::format("{:.3e}", kl / kl_count) : "-", fl_count ? fmt::format("{:.4f}", fl / fl_count) : "-");
  }
  // The same mean SQNR split by layer and by context (pooled over heads and the other axis).
  for (const char* axis : {"layer", "context"}) {
    const ByAxis g = group_by(rows, axis);
    const std::vector<std::string>& keys = g.keys;
    if (keys.size() < 2) continue;
    md += fmt::format("\nMean SQNR dB by {} (over heads{}):\n\n| recipe |", axis, std::string(axis) == "layer" ? " and contexts" : " and layers");
    for (const auto& k : keys) md += " " + std::string(axis) + " " + md_text(k) + " (dB) |";
    md += "\n|---|" + [&] { std::string x; for (std::size_t i = 0; i < keys.size(); ++i) x += "---|"; return x; }() + "\n";
    for (const auto& [name, recipe] : e.recipes) {
      (void)recipe;
      std::string line = fmt::format("| {} |", md_code(name));
      bool any = false;
      for (const auto& k : keys) {
        const auto it = g.cells.find({name, k});
        any |= it != g.cells.end();
        line += it == g.cells.end() ? " - |" : fmt::format(" {:.2f} |", it->second.sqnr.mean());
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
    // The GPU's refusals (a recipe no kernel implements) and the emulator's (a softmax that does not
    // apply the problem's attention variant), each under its own heading.
    const bool gpu = uncovered.front().value("backend", std::string("gpu")) == "gpu";
    md += gpu ? "\nNot covered by the GPU kernels (not run, never silently emulated):\n\n"
              : "\nNot run: the recipe does not apply the layer's attention variant (never run as plain attention):\n\n";
    std::set<std::string> seen;
    for (const json& u : uncovered)
      if (seen.insert(u["recipe"].get<std::string>()).second) md += fmt::format("- {}: {}\n", md_code(u["recipe"].get<std::string>()), md_text(u["reason"].get<std::string>()));
  }
  return md;

}

// figures/sqnr_by_layer.csv and error_by_context.csv: what sqnr_per_recipe.png and
// error_vs_context.png draw, aggregated here (the summary's tables' numbers), not by the plotter.
void write_error_figure_data(const Experiment& e, const std::vector<json>& rows, const fs::path& dir) {
  std::string by_layer = "recipe,layer,mean_sqnr_db,rows,exact_rows\n", by_context = "recipe,context,mean_sqnr_db,mean_kl,mean_rel_l2,rows\n";
  const ByAxis layers = group_by(rows, "layer"), contexts = group_by(rows, "context");
  for (const auto& [name, recipe] : e.recipes) {
    (void)recipe;
    for (const std::string& k : layers.keys) {
      const auto it = layers.cells.find({name, k});
      if (it == layers.cells.end()) continue;
      const DbMean& m = it->second.sqnr;
      by_layer += fmt::format("{},{},{},{},{}\n", csv_text(name), csv_text(k), m.mean(), m.count(), m.exact_count());
    }
    for (const std::string& k : contexts.keys) {
      const auto it = contexts.cells.find({name, k});
      if (it == contexts.cells.end()) continue;
      const ByAxis::Cell& c = it->second;
      by_context += fmt::format("{},{},{},{},{},{}\n", csv_text(name), k, c.sqnr.mean(), c.kl_count ? fmt::format("{}", c.kl / c.kl_count) : "",
                                c.rel_l2 / c.sqnr.count(), c.sqnr.count());
    }
  }
  fs::create_directories(dir / "figures");
  write_atomic(dir / "figures" / "sqnr_by_layer.csv", by_layer);
  write_atomic(dir / "figures" / "error_by_context.csv", by_context);
}

// figures/*.csv from the statistics log.
void write_figure_data(const std::vector<json>& stats, const fs::path& dir) {
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
}

}  // namespace

void write_run_report(const Experiment& e, const ReportRun& report, bool summary) {
  const fs::path& dir = report.dir();
  const std::vector<json> rows = read_log(dir / "results.jsonl");
  write_atomic(dir / "results.csv", results_csv(e, rows));
  write_figure_data(read_log(dir / "stats.jsonl"), dir);
  write_error_figure_data(e, rows, dir);
  static constexpr ReportKind kRun = ReportKind::run;
  report.finish(summary_md(e, rows, dir),
                {.files = "summary.md, results.csv, results.jsonl, config.json, figures/", .figures = &kRun, .print = summary, .draw = summary,
                 .summary_first = true});
}

}  // namespace qattn
