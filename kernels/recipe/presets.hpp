#pragma once
// Named recipes of real kernels, as data with their provenance: `preset=NAME` in the one-line form
// (or "preset": NAME in JSON) starts from the preset's line, and the other keys given override it.
// `qattn presets` prints them; docs/peers/ says how each was read or proven.
#include <vector>

namespace qattn {

struct RecipePreset {
  const char* name;
  const char* line;    // the preset as a one-line recipe
  const char* source;  // repository, commit or version, file
  const char* note;    // what it covers, where it ran, and what it leaves out
};
const std::vector<RecipePreset>& recipe_presets();

}  // namespace qattn
