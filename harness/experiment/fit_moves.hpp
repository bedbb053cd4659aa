#pragma once
// The search space of `qattn fit`: every recipe one knob away from a recipe, the values and their
// order from the knob table (kernels/recipe/knobs.cpp). A knob is one key of
// the recipe language (an operand's format, granularity, scale format, division, absmax rule or
// rounding; P's format and multiplier; smoothing; Q pre-scaling; the scale order; the softmax and
// its constants; the denominator; the accumulators, measured models included; the tiles; the key
// padding; the output format). Moves that need a second key to be valid come with it (softmax=qflash
// brings int8/tensor Q, K and V and int8 P at 127).
#include <string>
#include <vector>

#include "kernels/recipe/recipe.hpp"

namespace qattn {

struct FitMove {
  std::string knob;  // what changed, e.g. "q: int8/token -> int8/block:128"
  std::string line;  // the whole recipe after the move (one line; validated by whoever parses it)
  // A move into another family of recipes (another softmax), whose own knobs start at defaults: it
  // is judged by where a search started from it ends, not by its first step.
  bool restart = false;
};

// Every single-knob neighbour of r, in a fixed order, each a different recipe from r and from the
// others (some may be invalid: the caller parses and skips them).
std::vector<FitMove> fit_moves(const Recipe& r);

}  // namespace qattn
