#include "harness/experiment/experiment.hpp"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
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
      bad(e, where.empty() ? k : where + "." + k, "unknown key; expected one of: " + known);
    }
  }
}

template <typename T>
T get(const Experiment& e, const json& j, const std::string& where, const char* expected) {
  try {
    return j.get<T>();
  } catch (const json::exception&) {
    bad(e, where, std::string("expected ") + expected + ", got " + j.dump());
  }
}

std::string layer_name(const Experiment& e, const json& j, const std::string& where) {
  if (j.is_number_integer()) return std::to_string(j.get<long long>());
  if (j.is_string()) return j.get<std::string>();
  bad(e, where, "expected a layer index or name, got " + j.dump());
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
  if (j.contains("seed")) e.seed = get<std::uint64_t>(e, j["seed"], "seed", "a non-negative integer");
  if (j.contains("kl_rows")) e.kl_rows = get<int>(e, j["kl_rows"], "kl_rows", "an integer");
  if (e.kl_rows < 0) bad(e, "kl_rows", "expected >= 0");

  if (j.contains("selection")) {
    const json& s = j["selection"];
    if (!s.is_object()) bad(e, "selection", "expected an object");
    only_keys(e, s, "selection", {"layers", "heads", "contexts", "rows"});
    if (s.contains("layers")) {
      if (!s["layers"].is_array()) bad(e, "selection.layers", "expected a list of layer indices");
      for (std::size_t i = 0; i < s["layers"].size(); ++i) e.layers.push_back(layer_name(e, s["layers"][i], "selection.layers[" + std::to_string(i) + "]"));
    }
    if (s.contains("heads")) e.heads = get<std::vector<int>>(e, s["heads"], "selection.heads", "a list of query-head indices");
    if (s.contains("contexts")) e.contexts = get<std::vector<int>>(e, s["contexts"], "selection.contexts", "a list of token counts");
    for (std::size_t i = 0; i < e.contexts.size(); ++i)
      if (e.contexts[i] <= 0) bad(e, "selection.contexts[" + std::to_string(i) + "]", "expected a positive token count");
    if (s.contains("rows")) e.rows = get<int>(e, s["rows"], "selection.rows", "an integer (sampled query rows; 0 = all)");
    if (e.rows < 0) bad(e, "selection.rows", "expected >= 0");
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
  // A sweep: a base recipe and lists of values per key; their cartesian product is added.
  if (j.contains("sweep")) {
    const json& s = j["sweep"];
    if (!s.is_object()) bad(e, "sweep", "expected an object with 'base' and 'vary'");
    only_keys(e, s, "sweep", {"base", "vary"});
    const std::string base = s.contains("base") ? get<std::string>(e, s["base"], "sweep.base", "a one-line recipe") : "";
    if (!s.contains("vary") || !s["vary"].is_object()) bad(e, "sweep.vary", "expected an object of key: [values]");
    std::vector<std::string> lines{base};
    for (const auto& [key, values] : s["vary"].items()) {
      if (!values.is_array() || values.empty()) bad(e, "sweep.vary." + key, "expected a non-empty list of values");
      std::vector<std::string> next;
      for (const auto& line : lines)
        for (std::size_t i = 0; i < values.size(); ++i) {
          const std::string v = values[i].is_string() ? values[i].get<std::string>() : values[i].dump();
          next.push_back(line + (line.empty() ? "" : " ") + key + "=" + v);
        }
      lines = std::move(next);
    }
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string where = "sweep (combination " + std::to_string(i) + ": " + lines[i] + ")";
      try {
        e.recipes.emplace_back(lines[i], recipe_from_string(lines[i]));
      } catch (const std::invalid_argument& err) {
        bad(e, where, err.what());
      }
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
