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
    std::vector<std::string> keys;
    std::map<std::pair<std::string, std::string>, DbMean> cell;  // (recipe, key) -> its rows' SQNR
    for (const json& r : rows) {
      const std::string k = r[axis].is_string() ? r[axis].get<std::string>() : std::to_string(r[axis].get<int>());
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      cell[{r["recipe"].get<std::string>(), k}].add(as_double(r["sqnr_db"]));
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
        line += it == cell.end() ? " - |" : fmt::format(" {:.2f} |", it->second.mean());
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
  static constexpr ReportKind kRun = ReportKind::run;
  report.finish(summary_md(e, rows, dir),
                {.files = "summary.md, results.csv, results.jsonl, config.json, figures/", .figures = &kRun, .print = summary, .draw = summary,
                 .summary_first = true});
}

}  // namespace qattn
