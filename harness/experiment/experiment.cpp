#include "harness/experiment/experiment.hpp"

#include "harness/io/text.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>
#include <sstream>
#include <algorithm>
#include <stdexcept>

#include "harness/io/json_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/formats/codec.hpp"

namespace qattn {

namespace {

using json = nlohmann::ordered_json;  // keeps the file's order of recipes

[[noreturn]] void bad(const Experiment& e, const std::string& where, const std::string& what) {
  throw std::invalid_argument(e.file + ": " + where + ": " + what);
}

void only_keys(const Experiment& e, const json& j, const std::string& where, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (!allowed.count(k)) {
      std::string known;
      for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
      bad(e, where.empty() ? k : where + "." + k, "unknown key" + did_you_mean(k, allowed) + "; expected one of: " + known);
    }
  }
}

template <typename T>
T get(const Experiment& e, const json& j, const std::string& where, const char* expected) {
  try {
    T v = j.get<T>();
    if constexpr (std::is_same_v<T, std::string>) {
      // A NUL would cut every message and path that carries the string at that point.
      if (v.find('\0') != std::string::npos) bad(e, where, std::string("contains a NUL character; expected ") + expected);
    }
    return v;
  } catch (const json::exception&) {
    bad(e, where, std::string("expected ") + expected + ", got " + json_brief(j));
  }
}

// An integer in [lo, hi]: JSON numbers that are not integers, or outside the range (2^32, -1 for a
// count, 1e20), are errors rather than a silent wrap or truncation.
long long get_int(const Experiment& e, const json& j, const std::string& where, long long lo, long long hi, const char* expected) {
  const bool integral = j.is_number_integer() || (j.is_number_float() && std::isfinite(j.get<double>()) && j.get<double>() == std::floor(j.get<double>()));
  if (!integral) bad(e, where, std::string("expected ") + expected + ", got " + json_brief(j));
  const bool fits = j.is_number_unsigned() ? j.get<unsigned long long>() <= static_cast<unsigned long long>(hi) &&
                                                 (lo <= 0 || j.get<unsigned long long>() >= static_cast<unsigned long long>(lo))
                    : j.is_number_integer() ? j.get<long long>() >= lo && j.get<long long>() <= hi
                                            : j.get<double>() >= static_cast<double>(lo) && j.get<double>() <= static_cast<double>(hi);
  if (!fits) bad(e, where, std::string("expected ") + expected + " in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + json_brief(j));
  return j.is_number_float() ? static_cast<long long>(j.get<double>()) : j.get<long long>();
}

std::vector<int> get_ints(const Experiment& e, const json& j, const std::string& where, long long lo, long long hi, const char* expected) {
  if (!j.is_array()) bad(e, where, std::string("expected a list of ") + expected + ", got " + json_brief(j));
  std::vector<int> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const int v = static_cast<int>(get_int(e, j[i], w, lo, hi, expected));
    for (std::size_t k = 0; k < out.size(); ++k)
      if (out[k] == v) bad(e, w, std::to_string(v) + " is listed twice (also at [" + std::to_string(k) + "]); each unit runs once");
    out.push_back(v);
  }
  return out;
}

// {"from": 256, "to": 4096, "factor": 2} (256, 512, ..., 4096) or {"from": 512, "to": 2048, "step": 512}.
std::vector<int> context_range(const Experiment& e, const json& r) {
  only_keys(e, r, "selection.contexts", {"from", "to", "factor", "step"});
  const std::string w = "selection.contexts";
  if (!r.contains("from") || !r.contains("to")) bad(e, w, "a range needs from and to, and factor or step");
  const long long from = get_int(e, r["from"], w + ".from", 1, std::numeric_limits<int>::max(), "a token count");
  const long long to = get_int(e, r["to"], w + ".to", from, std::numeric_limits<int>::max(), "a token count >= from");
  if (r.contains("factor") == r.contains("step")) bad(e, w, "expected exactly one of factor (geometric) or step (arithmetic)");
  std::vector<int> out;
  if (r.contains("factor")) {
    const long long f = get_int(e, r["factor"], w + ".factor", 2, 1024, "an integer factor");
    for (long long c = from; c <= to; c *= f) out.push_back(static_cast<int>(c));
  } else {
    const long long st = get_int(e, r["step"], w + ".step", 1, std::numeric_limits<int>::max(), "a token step");
    for (long long c = from; c <= to; c += st) {
      out.push_back(static_cast<int>(c));
      if (out.size() > 4096) bad(e, w, "the range has more than 4096 contexts");
    }
  }
  return out;
}

std::string layer_name(const Experiment& e, const json& j, const std::string& where) {
  if (j.is_number_integer()) return std::to_string(get_int(e, j, where, 0, std::numeric_limits<int>::max(), "a layer index"));
  if (j.is_string()) return j.get<std::string>();
  bad(e, where, "expected a layer index or name, got " + json_brief(j));
}

// "p": ["int8/static:127", ...] each with a static multiplier: threshold = flush_threshold / S.
PFormatThreshold p_threshold(const Experiment& e, const std::string& text, const std::string& where) {
  OperandQuant o;
  try {
    o = operand_from_string(text, where);
  } catch (const std::invalid_argument& err) {
    bad(e, where, err.what());
  }
  if (o.unit_scale || o.spec.rule != ScaleRule::static_multiplier) bad(e, where, "'" + text + "': expected FORMAT/static:S, e.g. e4m3/static:448");
  if (!(o.spec.multiplier > 0)) bad(e, where, "'" + text + "': the static multiplier must be positive");
  return {text, flush_threshold(format_of(o.spec.format)) / o.spec.multiplier};
}

}  // namespace

Experiment read_experiment(const std::string& path) {
  Experiment e;
  e.file = path;
  const json j = read_json_file(path, "experiment file");
  if (!j.is_object()) bad(e, "(top)", "expected a JSON object");
  only_keys(e, j, "", {"name", "dataset", "selection", "recipes", "sweep", "statistics", "output", "seed", "kl_rows"});
  if (!j.contains("name")) bad(e, "name", "missing; expected the experiment's name");
  e.name = get<std::string>(e, j["name"], "name", "a string");
  if (!j.contains("dataset")) bad(e, "dataset", "missing; expected the path of an HDF5 dump");
  e.dataset = get<std::string>(e, j["dataset"], "dataset", "a string");
  e.output = j.contains("output") ? get<std::string>(e, j["output"], "output", "a string") : "reports/" + e.name;
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) bad(e, "seed", "expected a non-negative integer, got " + json_brief(j["seed"]));
    e.seed = j["seed"].get<std::uint64_t>();
  }
  if (j.contains("kl_rows")) e.kl_rows = static_cast<int>(get_int(e, j["kl_rows"], "kl_rows", 0, 1 << 20, "a row count (0 = no KL)"));

  if (j.contains("selection")) {
    const json& s = j["selection"];
    if (!s.is_object()) bad(e, "selection", "expected an object");
    only_keys(e, s, "selection", {"layers", "heads", "contexts", "rows"});
    if (s.contains("layers") && s["layers"] == "all") {
      // every layer of the dump (as when "layers" is left out)
    } else if (s.contains("layers")) {
      if (!s["layers"].is_array()) bad(e, "selection.layers", "expected a list of layer indices or names, or \"all\"");
      for (std::size_t i = 0; i < s["layers"].size(); ++i) {
        const std::string where = "selection.layers[" + std::to_string(i) + "]";
        const std::string name = layer_name(e, s["layers"][i], where);
        for (std::size_t k = 0; k < e.layers.size(); ++k)
          if (e.layers[k] == name) bad(e, where, "layer " + name + " is listed twice (also at [" + std::to_string(k) + "]); each unit runs once");
        e.layers.push_back(name);
      }
    }
    if (s.contains("heads")) e.heads = get_ints(e, s["heads"], "selection.heads", 0, std::numeric_limits<int>::max(), "query-head indices");
    if (s.contains("contexts") && s["contexts"].is_object()) {
      e.contexts = context_range(e, s["contexts"]);
    } else if (s.contains("contexts")) {
      e.contexts = get_ints(e, s["contexts"], "selection.contexts", 1, std::numeric_limits<int>::max(), "positive token counts");
    }
    if (s.contains("rows")) e.rows = static_cast<int>(get_int(e, s["rows"], "selection.rows", 0, std::numeric_limits<int>::max(), "a row count (sampled query rows; 0 = all)"));
  }

  // Named recipes: {"name": "line" | {...}} or a list of lines / objects.
  if (j.contains("recipes")) {
    const json& r = j["recipes"];
    const auto add = [&](const std::string& name, const json& v, const std::string& where) {
      for (const auto& [n, rr] : e.recipes) {
        (void)rr;
        if (n == name) bad(e, where, "duplicate recipe name '" + name + "'");
      }
      try {
        e.recipes.emplace_back(name, recipe_from_json(nlohmann::json::parse(v.dump()), e.file + ": " + where));
      } catch (const std::invalid_argument& err) {
        throw std::invalid_argument(err.what());
      }
    };
    if (r.is_object()) {
      for (const auto& [name, v] : r.items()) add(name, v, "recipes." + name);
    } else if (r.is_array()) {
      for (std::size_t i = 0; i < r.size(); ++i) {
        const std::string where = "recipes[" + std::to_string(i) + "]";
        add(r[i].is_string() ? r[i].get<std::string>() : where, r[i], where);
      }
    } else {
      bad(e, "recipes", "expected an object of named recipes or a list");
    }
  }
  // A sweep: a base recipe, "vary" lists whose cartesian product is taken, and "zip" lists of one
  // length taken together (the i-th values of every zip key form one combination); each
  // combination of zip x vary is one recipe named by its line. A key in both the base and the
  // sweep takes the sweep's value (stated in sweep_overrides).
  if (j.contains("sweep")) {
    const json& s = j["sweep"];
    if (!s.is_object()) bad(e, "sweep", "expected an object with 'base' and 'vary' and/or 'zip'");
    only_keys(e, s, "sweep", {"base", "vary", "zip"});
    const std::string base = s.contains("base") ? get<std::string>(e, s["base"], "sweep.base", "a one-line recipe") : "";
    if (!s.contains("vary") && !s.contains("zip")) bad(e, "sweep", "expected 'vary' (a product) and/or 'zip' (paired lists)");
    for (const char* part : {"vary", "zip"}) {
      if (s.contains(part) && (!s[part].is_object() || s[part].empty())) bad(e, std::string("sweep.") + part, "expected an object of key: [values]");
    }
    const auto text_of = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    // Combinations as (key, value) lists: the zip tuples first, then the product over vary.
    std::vector<std::vector<std::pair<std::string, std::string>>> combos{{}};
    std::set<std::string> swept;
    if (s.contains("zip")) {
      std::size_t n = 0;
      for (const auto& [key, values] : s["zip"].items()) {
        const std::string w = "sweep.zip." + key;
        if (!values.is_array() || values.empty()) bad(e, w, "expected a non-empty list of values");
        if (n != 0 && values.size() != n) bad(e, w, std::to_string(values.size()) + " values; the zip lists must have one length (the first has " + std::to_string(n) + ")");
        n = values.size();
        swept.insert(key);
        e.varied_keys.push_back(key);
      }
      std::vector<std::vector<std::pair<std::string, std::string>>> tuples(n);
      for (const auto& [key, values] : s["zip"].items())
        for (std::size_t i = 0; i < n; ++i) tuples[i].emplace_back(key, text_of(values[i]));
      combos = tuples;
    }
    if (s.contains("vary")) {
      for (const auto& [key, values] : s["vary"].items()) {
        const std::string w = "sweep.vary." + key;
        if (!values.is_array() || values.empty()) bad(e, w, "expected a non-empty list of values");
        if (!swept.insert(key).second) bad(e, w, "key '" + key + "' is also in sweep.zip; expected each key in one of them");
        e.varied_keys.push_back(key);
        std::vector<std::vector<std::pair<std::string, std::string>>> next;
        for (const auto& c : combos)
          for (std::size_t i = 0; i < values.size(); ++i) {
            next.push_back(c);
            next.back().emplace_back(key, text_of(values[i]));
          }
        combos = std::move(next);
        if (combos.size() > 100000) bad(e, "sweep", "more than 100,000 combinations");
      }
    }
    std::string base_kept;
    std::istringstream in(base);
    for (std::string tok; in >> tok;) {
      const std::string key = tok.substr(0, tok.find('='));
      if (swept.count(key)) {
        e.sweep_overrides.push_back("sweep.base's " + tok + " is replaced by each combination's " + key);
        continue;
      }
      base_kept += (base_kept.empty() ? "" : " ") + tok;
    }
    for (std::size_t i = 0; i < combos.size(); ++i) {
      std::string line = base_kept;
      for (const auto& [k, v] : combos[i]) line += (line.empty() ? "" : " ") + k + "=" + v;
      const std::string where = "sweep (combination " + std::to_string(i) + ": " + line + ")";
      for (const auto& [n, rr] : e.recipes) {
        (void)rr;
        if (n == line) bad(e, where, "the recipe '" + line + "' is already in the experiment (a named recipe or an earlier combination); each recipe runs once");
      }
      try {
        e.recipes.emplace_back(line, recipe_from_string(line));
      } catch (const std::invalid_argument& err) {
        bad(e, where, err.what());
      }
      e.varied[line] = combos[i];
    }
  }
  if (e.recipes.empty()) bad(e, "recipes", "no recipes; expected 'recipes' or 'sweep'");

  if (j.contains("statistics")) {
    const json& s = j["statistics"];
    if (!s.is_object()) bad(e, "statistics", "expected an object");
    only_keys(e, s, "statistics", {"p_formats"});
    if (s.contains("p_formats")) {
      const auto list = get<std::vector<std::string>>(e, s["p_formats"], "statistics.p_formats", "a list like [\"int8/static:127\", \"e4m3/static:448\"]");
      for (std::size_t i = 0; i < list.size(); ++i) e.p_formats.push_back(p_threshold(e, list[i], "statistics.p_formats[" + std::to_string(i) + "]"));
    }
  }
  return e;
}

}  // namespace qattn
