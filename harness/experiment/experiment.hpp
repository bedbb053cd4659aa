#pragma once
// An experiment file: a dataset, a selection, a recipe sweep and an output folder. Parsing is
// strict: unknown keys are errors, and every error names the file and the JSON path.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/recipe/recipe.hpp"

namespace qattn {

struct PFormatThreshold {
  std::string label;  // e.g. "int8/static:127"
  double threshold;   // p / max(p) at or below which the format flushes
};

struct Experiment {
  std::string file;                 // where it was read from
  std::string name;
  std::string dataset;
  std::vector<std::string> layers;  // empty = all
  std::vector<int> heads;           // empty = all
  std::vector<int> contexts;        // first-n-token lengths; empty = the whole dump
  int rows = 0;                     // sampled query rows per (layer, context); 0 = all rows
  int kl_rows = 16;                 // sampled rows per head for KL, TV and the P statistics
  std::uint64_t seed = 1;
  std::vector<std::pair<std::string, Recipe>> recipes;  // name, recipe (sweeps expanded)
  std::vector<PFormatThreshold> p_formats;              // for the flushed-mass statistic
  std::string output;               // report folder
  // Sweep recipes: each one's swept (key, value) pairs, the swept keys in order (CSV columns), and
  // what the sweep replaced in its base.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> varied;
  std::vector<std::string> varied_keys;
  std::vector<std::string> sweep_overrides;
};

// Throws std::invalid_argument "FILE: json.path: what was expected".
Experiment read_experiment(const std::string& path);

}  // namespace qattn
