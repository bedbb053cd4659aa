#pragma once
// `qattn fit`: which recipe a kernel implements, found from its outputs. Starting from a recipe,
// a beam search over single-knob moves (fit_moves.hpp) keeps the moves that bring the recipe's
// emulation nearest the kernel's outputs (kernel-vs-recipe SQNR, pooled over the chosen units and
// sampled rows), until no step gains or the time budget is spent. The result says which knobs
// moved the distance, ranks the recipes seen, and whether the best meets the lab's rule: the kernel
// at least 30 dB nearer the recipe than the recipe is to float64.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qattn {

// The rule a recipe must meet to be called the kernel's: kernel vs recipe at least this many dB
// above recipe vs float64 (what the kernel adds beyond its formats is then 1000x below their error).
inline constexpr double kFitRuleDb = 30;

struct FitOptions {
  std::string dataset;                // the dump the kernel ran on
  std::vector<std::string> outputs;   // the kernel's qattn-outputs/1 files
  std::string start;                  // the recipe the search starts from ("" = the files' recipe attribute)
  std::string output;                 // report folder
  int rows = 32;                      // query rows sampled per unit (0 = every row the files hold)
  std::uint64_t seed = 1;
  double budget_s = 600;              // wall-clock budget; the best so far is reported when it runs out
  double min_gain_db = 0.05;          // a move is taken only if it gains more than this
  int top = 10;                       // ranked candidates in the summary
  int beam = 3;                       // recipes expanded per step (1: a greedy descent)
  bool force = false, resume = false, quiet = false;
  std::string command_line;
  std::function<void()> between_evaluations;  // may throw to stop (Ctrl-C from Python)
};

struct FitStep {
  std::string knob;                   // "start", or the move taken
  std::string line;                   // the recipe after it (canonical)
  double kernel_vs_recipe_db = 0;
  double recipe_vs_float64_db = 0;
};

struct FitResult {
  std::vector<FitStep> path;          // the start, then each move taken: the knobs that moved the distance
  std::vector<FitStep> ranked;        // the best recipes evaluated, nearest first (knob: the move that made it)
  bool meets_rule = false;            // the best recipe (path.back()) meets kFitRuleDb
  // The emulator's own floor at the best recipe: SQNR between its outputs and the same recipe with a
  // float GEMM summed in the other honest order (fp32 <-> exact), the lower of Q K^T's and P V's; +inf
  // where neither GEMM sums floats that way. at_floor: the best's kernel-vs-recipe distance is within
  // 3 dB of it, either side (what remains is a GEMM's inner order, not a missing knob).
  double floor_db = INFINITY;
  int floor_gemms = 0;  // the GEMMs whose other order was emulated (0: no float GEMM sums in fp32 or exactly)
  bool at_floor = false;
  int evaluated = 0;                  // recipes emulated in this call (cached ones from a resumed report not counted)
  bool budget_spent = false;
  double seconds = 0;
  int skipped = 0;                    // recipes the search made that do not apply to this input (skipped, counted)
  std::vector<std::string> skipped_why;  // the distinct reasons, first few
};

// Checks everything (files, dump, start recipe, options) before any work. Throws
// std::invalid_argument / DatasetError with one message naming the file, option or field.
FitResult fit_recipe(const FitOptions& opt);

}  // namespace qattn
