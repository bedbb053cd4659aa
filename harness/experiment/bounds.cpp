#include "harness/experiment/bounds.hpp"

#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "harness/experiment/runner.hpp"
#include "harness/io/json_file.hpp"

namespace qattn {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// The emulator is deterministic; the margins absorb only what differs between hosts: libm's exp2f
// and the compiler's vectorization of float64 sums move a dB figure in its second decimal.
constexpr double kSqnrMarginDb = 0.25;
constexpr double kKlMarginFactor = 1.25;
constexpr double kKlMarginAbs = 1e-6;

struct Agg {
  double sqnr = 0, kl = 0;
  int n = 0;
};

double parse_db(const json& v) {
  if (v.is_number()) return v.get<double>();
  return v.get<std::string>() == "inf" ? INFINITY : NAN;
}

}  // namespace

int check_bounds(const std::string& bounds_file, bool update) {
  const json b = read_json_file(bounds_file, "bounds file");
  if (!b.is_object() || !b.contains("experiment") || !b["experiment"].is_string()) {
    throw std::invalid_argument(bounds_file + ": experiment: missing; expected the path of the experiment file the bounds belong to");
  }
  for (const auto& [k, v] : b.items()) {
    (void)v;
    if (k != "experiment" && k != "note" && k != "bounds") throw std::invalid_argument(bounds_file + ": " + k + ": unknown key; expected experiment, note, bounds");
  }
  Experiment e = read_experiment(b["experiment"].get<std::string>());
  const fs::path tmp = fs::temp_directory_path() / fmt::format("qattn-check-{}", ::getpid());
  e.output = tmp.string();
  RunOptions ro;
  ro.force = true;
  ro.command_line = "qattn check " + bounds_file;
  run_experiment(e, ro);

  std::map<std::string, Agg> agg;  // recipe|layer|context
  std::ifstream log(tmp / "results.jsonl");
  for (std::string line; std::getline(log, line);) {
    const json r = json::parse(line);
    Agg& a = agg[r["recipe"].get<std::string>() + "|" + r["layer"].get<std::string>() + "|" + std::to_string(r["context"].get<int>())];
    a.sqnr += parse_db(r["sqnr_db"]);
    a.kl += r["kl_mean"].get<double>();
    ++a.n;
  }
  fs::remove_all(tmp);

  if (update) {
    json out = {{"experiment", b["experiment"]},
                {"note", fmt::format("mean over heads per recipe, layer and context; sqnr_db_min = measured - {} dB, kl_max = measured x {} + {}",
                                     kSqnrMarginDb, kKlMarginFactor, kKlMarginAbs)},
                {"bounds", json::array()}};
    for (const auto& [key, a] : agg) {
      const auto p1 = key.find('|'), p2 = key.rfind('|');
      out["bounds"].push_back({{"recipe", key.substr(0, p1)}, {"layer", key.substr(p1 + 1, p2 - p1 - 1)},
                               {"context", std::stoi(key.substr(p2 + 1))},
                               {"sqnr_db_min", std::round((a.sqnr / a.n - kSqnrMarginDb) * 100) / 100},
                               {"kl_max", a.kl / a.n * kKlMarginFactor + kKlMarginAbs}});
    }
    const std::string tmpfile = bounds_file + ".tmp";
    std::ofstream(tmpfile) << out.dump(2) << "\n";
    fs::rename(tmpfile, bounds_file);
    fmt::print("check: wrote {} bounds to {}\n", out["bounds"].size(), bounds_file);
    return 0;
  }

  int violations = 0;
  if (!b.contains("bounds") || !b["bounds"].is_array()) throw std::invalid_argument(bounds_file + ": bounds: expected a list");
  for (std::size_t i = 0; i < b["bounds"].size(); ++i) {
    const json& x = b["bounds"][i];
    const std::string where = fmt::format("{}: bounds[{}]", bounds_file, i);
    if (!x.contains("recipe") || !x.contains("layer") || !x.contains("context")) throw std::invalid_argument(where + ": expected recipe, layer, context");
    const std::string key = x["recipe"].get<std::string>() + "|" + x["layer"].get<std::string>() + "|" + std::to_string(x["context"].get<int>());
    const auto it = agg.find(key);
    if (it == agg.end()) {
      fmt::print("FAIL recipe '{}' layer {} context {}: not in the experiment's results\n", x["recipe"].get<std::string>(),
                 x["layer"].get<std::string>(), x["context"].get<int>());
      ++violations;
      continue;
    }
    const double sqnr = it->second.sqnr / it->second.n, kl = it->second.kl / it->second.n;
    if (x.contains("sqnr_db_min") && !(sqnr >= x["sqnr_db_min"].get<double>())) {
      fmt::print("FAIL recipe '{}' layer {} context {}: mean SQNR {:.2f} dB < bound {:.2f} dB (worse by {:.2f} dB)\n",
                 x["recipe"].get<std::string>(), x["layer"].get<std::string>(), x["context"].get<int>(), sqnr,
                 x["sqnr_db_min"].get<double>(), x["sqnr_db_min"].get<double>() - sqnr);
      ++violations;
    }
    if (x.contains("kl_max") && !(kl <= x["kl_max"].get<double>())) {
      fmt::print("FAIL recipe '{}' layer {} context {}: mean KL {:.3e} > bound {:.3e} ({:.1f}x)\n", x["recipe"].get<std::string>(),
                 x["layer"].get<std::string>(), x["context"].get<int>(), kl, x["kl_max"].get<double>(), kl / x["kl_max"].get<double>());
      ++violations;
    }
  }
  fmt::print("check: {} bounds, {} violation(s)\n", b["bounds"].size(), violations);
  return violations;
}

}  // namespace qattn
