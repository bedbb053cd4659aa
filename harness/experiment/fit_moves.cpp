#include "harness/experiment/fit_moves.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <set>

#include "harness/io/recipe_io.hpp"
#include "kernels/recipe/knobs.hpp"

namespace qattn {

namespace {

using Keys = std::map<std::string, std::string>;

std::string line_of(const Keys& keys) {
  std::string s;
  for (const auto& [k, v] : keys) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

// Fit tries the operands first (ranks below this), then Q and K together, then the other knobs.
constexpr int kFitAfterOperands = 10;

}  // namespace

std::vector<FitMove> fit_moves(const Recipe& r) {
  Keys keys;
  const nlohmann::json canonical = to_json(r);
  for (const auto& [k, v] : canonical.items()) keys[k] = v.get<std::string>();
  std::vector<FitMove> moves;
  // A move is kept once per recipe: by its canonical text where it parses (a key set to its default
  // is no move), else by its own text (the caller reports why it does not parse).
  const auto canonical_of = [](const std::string& line) {
    try {
      return to_string(recipe_from_string(line));
    } catch (const std::exception&) {
      return line;
    }
  };
  std::set<std::string> seen = {to_string(r)};
  const auto add = [&](const std::string& knob, const Keys& changed, bool restart = false) {
    const std::string line = line_of(changed);
    if (seen.insert(canonical_of(line)).second) moves.push_back({knob, line, restart});
  };
  const auto set = [&](const std::string& key, const std::string& value) {
    Keys k = keys;
    const auto it = k.find(key);
    const std::string before = it == k.end() ? "(default)" : it->second;
    if (before == value) return;
    k[key] = value;
    add(key + ": " + before + " -> " + value, k);
  };
  std::vector<const RecipeKnob*> knobs;  // the knob table's, in the order fit tries them
  for (const RecipeKnob& k : recipe_knobs())
    if (k.fit_values != nullptr) knobs.push_back(&k);
  std::stable_sort(knobs.begin(), knobs.end(), [](const RecipeKnob* a, const RecipeKnob* b) { return a->fit_order < b->fit_order; });
  bool joint_done = false;
  for (const RecipeKnob* knob : knobs) {
    if (!joint_done && knob->fit_order >= kFitAfterOperands) {
      // Q and K together: Q K^T takes two integer or two float operands, so a change of number
      // family (int8 to fp16, say) is one move on both.
      for (const std::string& v : find_knob("q")->fit_values(r)) {
        Keys k = keys;
        k["q"] = k["k"] = v;
        add("q, k: " + keys.at("q") + ", " + keys.at("k") + " -> " + v, k);
      }
      joint_done = true;
    }
    for (const std::string& v : knob->fit_values(r)) set(knob->name, v);
  }
  if (r.softmax == SoftmaxKind::qflash_integer) {
    // Back to the float softmax (the qflash.* knobs, the lab's reading of the paper or the published
    // kernel's constants and rules, were tried above).
    Keys k = keys;
    k["softmax"] = "float";
    for (const RecipeKnob& knob : recipe_knobs())
      if (std::string(knob.name).rfind("qflash.", 0) == 0) k.erase(knob.name);
    add("softmax: qflash -> float", k, true);
  } else {
    // QFlash's integer softmax takes int8 per-tensor Q, K and V and int8 P at 127, summed exactly.
    Keys k = keys;
    k["softmax"] = "qflash";
    for (const char* op : {"q", "k", "v"}) k[op] = "int8/tensor";
    k["p"] = "int8/static:127";
    k["acc.qk"] = k["acc.pv"] = "exact";
    add("softmax: float -> qflash (int8/tensor Q K V, int8 P at 127, exact sums)", k, true);
  }
  return moves;
}

}  // namespace qattn
