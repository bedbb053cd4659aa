// `qattn fit`'s search space: from a generic recipe, one move reaches each accumulator model the
// recipe language names (so that a fit can find any of them), and no two moves are the same recipe.
#include <exception>
#include <set>
#include <string>

#include "harness/experiment/fit_moves.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "tests/catch.hpp"

using namespace qattn;

TEST_CASE("fit: one move reaches every accumulator model, on Q K^T and on P V", "[fit]") {
  const Recipe start = recipe_from_string("q=fp16 k=fp16 p=fp16 v=fp16");
  std::set<std::string> knobs, recipes = {to_string(start)};
  for (const FitMove& m : fit_moves(start)) {
    Recipe r;
    try {
      r = recipe_from_string(m.line);
    } catch (const std::exception&) {
      continue;  // an invalid neighbour: fit skips it too
    }
    knobs.insert(m.knob);
    INFO(m.knob);
    CHECK(recipes.insert(to_string(r)).second);  // a move is a new recipe
  }
  std::set<std::string> models = {"exact", "fp32", "fp16", "fp16fma"};
  for (const NamedAccumulator& n : kNamedAccumulators) models.insert(n.name);
  for (const std::string& model : models) {
    INFO(model);
    if (model == "fp32") continue;  // the start's own
    CHECK(knobs.count("acc.qk: fp32 -> " + model) == 1);
    CHECK(knobs.count("acc.pv: fp32 -> " + model) == 1);
  }
}
