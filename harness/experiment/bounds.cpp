#include "harness/experiment/bounds.hpp"

#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "harness/experiment/aggregate.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/runner.hpp"
#include "harness/io/json_file.hpp"

namespace qattn {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// A layer as reports and bounds hold it: the dump's name, or its number where the name is one.
bool is_layer(const json& v) { return v.is_string() || v.is_number_unsigned() || (v.is_number_integer() && v.get<long long>() >= 0); }

// The emulator is deterministic; the margins absorb only what differs between hosts: libm's exp2f
// and the compiler's vectorization of float64 sums move a dB figure in its second decimal.
constexpr double kSqnrMarginDb = 0.25;
constexpr double kKlMarginFactor = 1.25;
constexpr double kKlMarginAbs = 1e-6;

// Per (recipe, layer, context), over heads (aggregate.hpp). A kernel bit-equal to its recipe on a
// head has an infinite kernel-vs-recipe SQNR there: the bound is on the other heads' mean, and the
// exact heads are counted apart.
struct Agg {
  DbMean sqnr, own;
  double kl = 0;
  int kl_n = 0;
};

// kernel_vs_recipe_db_min: a number, or "inf" for a kernel that was bit-equal to its recipe on
// every head (it must stay so).
bool is_own_bound(const json& v) { return v.is_number() || v == "inf"; }

double parse_db(const json& v) {
  if (v.is_number()) return v.get<double>();
  return v.get<std::string>() == "inf" ? INFINITY : NAN;
}

// Every entry is checked before any work (a typo such as sqnr_db_mn is an error, not a pass).
void validate_bounds(const std::string& bounds_file, const json& b) {
  if (!b.contains("bounds") || !b["bounds"].is_array()) throw std::invalid_argument(bounds_file + ": bounds: expected a list");
  if (b["bounds"].empty()) throw std::invalid_argument(bounds_file + ": bounds: the list is empty; expected at least one bound (write them with --update)");
  for (std::size_t i = 0; i < b["bounds"].size(); ++i) {
    const json& x = b["bounds"][i];
    const std::string where = fmt::format("{}: bounds[{}]", bounds_file, i);
    if (!x.is_object()) throw std::invalid_argument(where + ": expected an object with recipe, layer, context and bounds");
    for (const auto& [k, v] : x.items()) {
      (void)v;
      if (k != "recipe" && k != "layer" && k != "context" && k != "sqnr_db_min" && k != "kl_max" && k != "kernel_vs_recipe_db_min") {
        throw std::invalid_argument(where + "." + k + ": unknown key; expected recipe, layer, context, sqnr_db_min, kl_max, kernel_vs_recipe_db_min");
      }
    }
    const bool layer_ok = x.contains("layer") && is_layer(x["layer"]);
    const bool context_ok = x.contains("context") && x["context"].is_number_integer() && x["context"].get<long long>() > 0 &&
                            x["context"].get<long long>() <= 2147483647;
    if (!x.contains("recipe") || !x["recipe"].is_string() || !layer_ok || !context_ok) {
      throw std::invalid_argument(where + ": expected recipe (string), layer (name or index) and context (a positive integer)");
    }
    for (const char* k : {"sqnr_db_min", "kl_max"}) {
      if (x.contains(k) && !x[k].is_number()) throw std::invalid_argument(where + "." + k + ": expected a number");
    }
    if (x.contains("kernel_vs_recipe_db_min") && !is_own_bound(x["kernel_vs_recipe_db_min"])) {
      throw std::invalid_argument(where + ".kernel_vs_recipe_db_min: expected a number, or \"inf\" (the kernel bit-equal to its recipe)");
    }
    if (!x.contains("sqnr_db_min") && !x.contains("kl_max") && !x.contains("kernel_vs_recipe_db_min")) {
      throw std::invalid_argument(where + ": no bound; expected sqnr_db_min, kl_max or kernel_vs_recipe_db_min");
    }
  }
}

// The bounds file, its keys checked (every entry too, unless it is to be rewritten).
json read_bounds(const std::string& bounds_file, bool update) {
  const json b = read_json_file(bounds_file, "bounds file");
  if (!b.is_object()) throw std::invalid_argument(bounds_file + ": expected a JSON object with experiment (or report), note, bounds");
  const bool from_report = b.contains("report");
  for (const auto& [k, v] : b.items()) {
    (void)v;
    if (k != "experiment" && k != "report" && k != "note" && k != "bounds") {
      throw std::invalid_argument(bounds_file + ": " + k + ": unknown key; expected experiment (or report), note, bounds");
    }
  }
  if (from_report == b.contains("experiment")) {
    throw std::invalid_argument(bounds_file + ": expected exactly one of experiment (recomputed) or report (a report folder, e.g. from qattn score)");
  }
  if (!b[from_report ? "report" : "experiment"].is_string()) {
    throw std::invalid_argument(bounds_file + ": " + (from_report ? "report" : "experiment") + ": expected a path (string)");
  }
  if (!update) validate_bounds(bounds_file, b);
  return b;
}

// Rows to check: a report folder as it is (qattn score's, or a run's), or the experiment recomputed
// into a temporary report (removed when the check ends).
struct RowSource {
  fs::path results, tmp;
  RowSource() = default;
  RowSource(const RowSource&) = delete;
  RowSource(RowSource&& o) noexcept : results(std::move(o.results)), tmp(std::exchange(o.tmp, {})) {}
  ~RowSource() {
    std::error_code ec;
    if (!tmp.empty()) fs::remove_all(tmp, ec);
  }
};

RowSource rows_to_check(const std::string& bounds_file, const json& b, bool update, bool quiet) {
  const bool from_report = b.contains("report");
  RowSource src;
  if (from_report) {
    src.results = fs::path(b["report"].get<std::string>()) / "results.jsonl";
    if (!fs::is_regular_file(src.results)) {
      throw std::invalid_argument(bounds_file + ": report: " + src.results.string() + " does not exist; expected a report folder written by qattn score or qattn run");
    }
    // summary.md is the last file run and score write: without it the report was interrupted, and
    // bounds from it would cover only the units that exist.
    if (update && !fs::is_regular_file(src.results.parent_path() / "summary.md")) {
      throw std::invalid_argument(bounds_file + ": report: " + src.results.parent_path().string() +
                                  " is incomplete (no summary.md: the command that wrote it was interrupted); complete it (qattn run --resume, "
                                  "or score again) before storing bounds from it");
    }
  } else {
    const std::string exp_file = b["experiment"].get<std::string>();
    std::error_code ec;
    if (!fs::exists(exp_file, ec)) {  // (a folder or an unreadable file: read_experiment names it)
      // Quoted with escapes: a path holding a line separator or a control character stays one line.
      throw std::invalid_argument(bounds_file + ": experiment: " + json(exp_file).dump(-1, ' ', true) +
                                  ": no such file; expected the path of an experiment JSON file");
    }
    Experiment e = read_experiment(exp_file);
    src.tmp = fs::temp_directory_path() / fmt::format("qattn-check-{}", ::getpid());
    e.output = src.tmp.string();
    RunOptions ro;
    ro.force = true;
    ro.quiet = quiet;
    // The verdict is the output: progress only where it redraws in place, no summary or figures.
    ro.progress_lines = false;
    ro.summary = false;
    ro.command_line = "qattn check " + bounds_file;
    run_experiment(e, ro);
    src.results = src.tmp / "results.jsonl";
  }

  return src;
}

// Per (recipe, layer, context): the rows' aggregate, each row checked as hostile input.
std::map<std::string, Agg> aggregate_rows(const fs::path& results) {
  std::map<std::string, Agg> agg;  // recipe|layer|context
  std::ifstream log(results);
  int line_no = 0;
  for (std::string line; std::getline(log, line);) {
    ++line_no;
    if (line.empty()) continue;
    const json r = json::parse(line, nullptr, false);
    const std::string at = fmt::format("{}:{}", results.string(), line_no);
    if (!r.is_object()) throw std::invalid_argument(at + ": not a JSON object; expected a results row written by qattn run or qattn score");
    const auto need = [&](const char* key, bool ok, const char* expected) {
      if (!r.contains(key) || !ok) throw std::invalid_argument(at + ": " + key + ": " + (r.contains(key) ? "expected " : "missing; expected ") + expected);
    };
    need("recipe", r.contains("recipe") && r["recipe"].is_string(), "a string");
    need("layer", r.contains("layer") && is_layer(r["layer"]), "a layer name or a non-negative integer");
    need("context", r.contains("context") && r["context"].is_number_integer(), "an integer");
    need("sqnr_db", r.contains("sqnr_db") && (r["sqnr_db"].is_number() || r["sqnr_db"] == "inf" || r["sqnr_db"] == "-inf"), "a number or \"inf\"");
    for (const char* k : {"kl_mean", "kernel_vs_recipe_sqnr_db"}) {
      if (r.contains(k) && !r[k].is_null() && !r[k].is_number() && r[k] != "inf") throw std::invalid_argument(at + ": " + k + ": expected a number, \"inf\" or null");
    }
    Agg& a = agg[r["recipe"].get<std::string>() + "|" + report::layer_name(r["layer"]) + "|" + std::to_string(r["context"].get<int>())];
    a.sqnr.add(parse_db(r["sqnr_db"]));
    if (r.contains("kl_mean") && !r["kl_mean"].is_null()) a.kl += parse_db(r["kl_mean"]), ++a.kl_n;
    if (r.contains("kernel_vs_recipe_sqnr_db") && !r["kernel_vs_recipe_sqnr_db"].is_null()) a.own.add(parse_db(r["kernel_vs_recipe_sqnr_db"]));
  }
  log.close();
  return agg;
}

// Per (recipe, layer, context): why a unit failed, when it did (failed.jsonl beside the rows).
std::map<std::string, std::string> failed_units(const fs::path& results) {
  std::map<std::string, std::string> failed;  // recipe|layer|context -> why it has no rows
  if (std::ifstream fl(results.parent_path() / "failed.jsonl"); fl) {
    for (std::string line; std::getline(fl, line);) {
      if (line.empty()) continue;
      const json r = json::parse(line, nullptr, false);
      if (r.is_object() && r.contains("recipe") && r["recipe"].is_string() && r.contains("layer") && is_layer(r["layer"]) &&
          r.contains("context") && r["context"].is_number_integer() && r.contains("reason") && r["reason"].is_string()) {
        failed[r["recipe"].get<std::string>() + "|" + report::layer_name(r["layer"]) + "|" + std::to_string(r["context"].get<int>())] = r["reason"].get<std::string>();
      }
    }
  }
  return failed;
}

// --update: the bounds file rewritten from the measured aggregates, each less its margin.
void write_bounds(const std::string& bounds_file, const json& b, const std::map<std::string, Agg>& agg) {
  const bool from_report = b.contains("report");
  json out = {{b.contains("report") ? "report" : "experiment", from_report ? b["report"] : b["experiment"]},
              {"note", fmt::format("mean over heads per recipe (or kernel), layer and context; sqnr_db_min = measured - {0} dB, "
                                   "kl_max = measured x {1} + {2}, kernel_vs_recipe_db_min = measured - {0} dB",
                                   kSqnrMarginDb, kKlMarginFactor, kKlMarginAbs)},
              {"bounds", json::array()}};
  for (const auto& [key, a] : agg) {
    const auto p1 = key.find('|'), p2 = key.rfind('|');
    json entry = {{"recipe", key.substr(0, p1)}, {"layer", report::layer_json(key.substr(p1 + 1, p2 - p1 - 1))}, {"context", std::stoi(key.substr(p2 + 1))},
                  {"sqnr_db_min", std::round((a.sqnr.mean() - kSqnrMarginDb) * 100) / 100}};
    if (a.kl_n > 0) entry["kl_max"] = a.kl / a.kl_n * kKlMarginFactor + kKlMarginAbs;
    if (a.own.finite_count() > 0) {
      entry["kernel_vs_recipe_db_min"] = std::round((a.own.mean_finite() - kSqnrMarginDb) * 100) / 100;
    } else if (a.own.exact_count() > 0) {
      entry["kernel_vs_recipe_db_min"] = "inf";  // bit-equal on every head: a single differing bit fails
    }
    out["bounds"].push_back(entry);
  }
  const std::string tmpfile = bounds_file + ".tmp";
  std::ofstream(tmpfile) << out.dump(2) << "\n";
  fs::rename(tmpfile, bounds_file);
  fmt::print("check: wrote {} bounds to {}\n", out["bounds"].size(), bounds_file);
}

// Each bound against the aggregates; every violation printed with what moved and by how much.
int count_violations(const json& b, const std::map<std::string, Agg>& agg, const std::map<std::string, std::string>& failed) {
  const bool from_report = b.contains("report");
  int violations = 0;
  const std::string source = from_report ? "the report's results" : "the experiment's results";
  for (std::size_t i = 0; i < b["bounds"].size(); ++i) {
    const json& x = b["bounds"][i];
    const std::string name = x["recipe"].get<std::string>(), layer = report::layer_name(x["layer"]);
    const int context = x["context"].get<int>();
    const auto it = agg.find(name + "|" + layer + "|" + std::to_string(context));
    if (it == agg.end()) {
      if (const auto f = failed.find(name + "|" + layer + "|" + std::to_string(context)); f != failed.end()) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: the unit failed (no metrics): {}\n", name, layer, context, f->second);
      } else {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: not in {}\n", name, layer, context, source);
      }
      ++violations;
      continue;
    }
    const Agg& a = it->second;
    const double sqnr = a.sqnr.mean();
    if (x.contains("sqnr_db_min") && !(sqnr >= x["sqnr_db_min"].get<double>())) {
      fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: mean SQNR {:.2f} dB < bound {:.2f} dB (worse by {:.2f} dB)\n", name, layer,
                 context, sqnr, x["sqnr_db_min"].get<double>(), x["sqnr_db_min"].get<double>() - sqnr);
      ++violations;
    }
    if (x.contains("kl_max")) {
      if (a.kl_n == 0) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: kl_max given but {} hold no KL (a kernel's outputs carry no P rows)\n", name,
                   layer, context, source);
        ++violations;
      } else if (const double kl = a.kl / a.kl_n; !(kl <= x["kl_max"].get<double>())) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: mean KL {:.3e} > bound {:.3e} ({:.1f}x)\n", name, layer, context, kl,
                   x["kl_max"].get<double>(), kl / x["kl_max"].get<double>());
        ++violations;
      }
    }
    if (x.contains("kernel_vs_recipe_db_min") && x["kernel_vs_recipe_db_min"] == "inf") {
      if (a.own.finite_count() > 0 || a.own.exact_count() == 0) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: the kernel is no longer bit-equal to its recipe ({} of {} heads differ{}); "
                   "the bound asks for bit-equality\n", name, layer, context, a.own.finite_count(), a.own.count(),
                   a.own.finite_count() > 0 ? fmt::format(", mean {:.2f} dB", a.own.mean_finite()) : std::string());
        ++violations;
      }
    } else if (x.contains("kernel_vs_recipe_db_min")) {
      if (a.own.count() == 0) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: kernel_vs_recipe_db_min given but {} name no recipe to compare with\n", name,
                   layer, context, source);
        ++violations;
      } else if (const double own = a.own.finite_count() > 0 ? a.own.mean_finite() : INFINITY; !(own >= x["kernel_vs_recipe_db_min"].get<double>())) {
        fmt::print(stderr, "FAIL recipe '{}' layer {} context {}: kernel vs recipe {:.2f} dB < bound {:.2f} dB (the kernel's own error grew by {:.2f} dB)\n",
                   name, layer, context, own, x["kernel_vs_recipe_db_min"].get<double>(), x["kernel_vs_recipe_db_min"].get<double>() - own);
        ++violations;
      }
    }
  }
  fmt::print("check: {} bounds, {} violation(s)\n", b["bounds"].size(), violations);
  return violations;
}

}  // namespace

int check_bounds(const std::string& bounds_file, bool update, bool quiet) {
  const json b = read_bounds(bounds_file, update);
  const RowSource src = rows_to_check(bounds_file, b, update, quiet);
  const std::map<std::string, Agg> agg = aggregate_rows(src.results);
  if (update) {
    write_bounds(bounds_file, b, agg);
    return 0;
  }
  return count_violations(b, agg, failed_units(src.results));
}

}  // namespace qattn
