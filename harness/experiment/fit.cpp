#include "harness/experiment/fit.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "harness/experiment/fit_moves.hpp"
#include "harness/experiment/progress.hpp"
#include "harness/experiment/report_run.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/score.hpp"
#include "harness/experiment/unit_score.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

namespace qattn {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace report;

namespace {

// One (outputs file, layer): its problem on the sampled rows, and the kernel's outputs there.
struct FitUnit {
  std::string file, layer;
  int context = 0;
  LayerSlice slice;
  std::vector<double> kernel;  // [Hq, rows, d]
};

struct Evaluation {
  double kernel_vs_recipe_db = -INFINITY, recipe_vs_float64_db = -INFINITY;
  std::string failed;  // why the recipe has no output to compare here
  bool invalid = false;  // failed because the recipe does not apply to this input (a group size that does not divide d, say)
};

double rule_margin(const Evaluation& e) { return e.kernel_vs_recipe_db - e.recipe_vs_float64_db; }

// A recipe the kernel implements has the kernel's error: if the kernel is the recipe plus its own
// error 30 dB below the recipe's, recipe vs float64 equals kernel vs float64 to a fraction of a dB.
// A move toward float64 (an unquantized operand) makes a recipe tens of dB more accurate than the
// kernel, and brings it as near the kernel as the kernel is to float64: a trap for a search by
// distance alone. The search therefore steers by the distance less each dB the recipe is more
// accurate than the kernel beyond this slack; a recipe on the kernel's track is at most a few dB
// more accurate on the way (K's mean removed before its scales are right, say: about 7 dB for
// SageAttention 1 from a per-token start).
constexpr double kAccuracySlackDb = 8;

// A kernel whose GEMMs sum in a third order sits about as far from the recipe as the recipe's two
// orders sit from each other; within 3 dB of that floor (twice or half its noise power) the distance
// is read as the order, not as a missing knob.
constexpr double kFloorSlackDb = 3;

void check_options(const FitOptions& o) {
  if (o.outputs.empty()) throw std::invalid_argument("fit: no outputs file given; expected one or more qattn-outputs/1 files");
  if (o.output.empty()) throw std::invalid_argument("fit --output: empty; expected a report folder");
  if (o.rows < 0) throw std::invalid_argument("fit --rows: " + std::to_string(o.rows) + "; expected a row count >= 0 (0 = every row)");
  if (!(o.budget_s > 0) || !std::isfinite(o.budget_s)) throw std::invalid_argument("fit --budget: expected a positive number of seconds");
  if (!(o.min_gain_db >= 0) || !std::isfinite(o.min_gain_db)) throw std::invalid_argument("fit --min-gain: expected a finite number of dB >= 0");
  if (o.top < 1) throw std::invalid_argument("fit --top: " + std::to_string(o.top) + "; expected at least 1");
  if (o.beam < 1 || o.beam > 64) throw std::invalid_argument("fit --beam: " + std::to_string(o.beam) + "; expected 1..64 recipes a step");
  (void)report::existing_for("fit", o.force, o.resume);  // both together: refused before any work
  need_utf8_path("fit: the dump", o.dataset);
  for (const std::string& f : o.outputs) need_utf8_path("fit: an outputs file", f);
  need_utf8_path("fit --output", o.output);
}

std::string start_line(const FitOptions& o, const std::vector<OutputsFile>& files) {
  if (!o.start.empty()) return o.start;
  std::string line;
  for (const OutputsFile& f : files) {
    if (f.recipe.empty()) {
      throw std::invalid_argument(f.path + ": attribute 'recipe': absent; give the recipe the search starts from (fit --from, e.g. "
                                  "\"q=int8/token k=int8/token p=fp16 v=fp16\")");
    }
    if (!line.empty() && f.recipe != line) {
      throw std::invalid_argument(f.path + ": attribute 'recipe' differs from another file's; give the starting recipe (fit --from)");
    }
    line = f.recipe;
  }
  return line;
}


// One row of an earlier fit's candidates.jsonl, checked as hostile input: a distance that is not a
// number or an infinity would be printed as the best (a NaN never is).
std::pair<std::string, Evaluation> cached_evaluation(const json& c, const std::string& where) {
  const auto bad = [&](const std::string& key, const std::string& expected) {
    return std::invalid_argument(where + ": key '" + key + "': " + (c.contains(key) ? c[key].dump() : std::string("absent")) + "; expected " + expected +
                                 " (the log was changed outside qattn: use --force to start the fit again)");
  };
  if (!c.contains("line") || !c["line"].is_string()) throw bad("line", "the recipe's line as a string");
  Evaluation e;
  for (const char* key : {"kernel_vs_recipe_db", "recipe_vs_float64_db"}) {
    const json& v = c.contains(key) ? c[key] : json();
    const bool ok = (v.is_number() && std::isfinite(v.get<double>())) || v == "inf" || v == "-inf";
    if (!ok) throw bad(key, "a finite number of dB, \"inf\" or \"-inf\"");
    (std::string(key) == "kernel_vs_recipe_db" ? e.kernel_vs_recipe_db : e.recipe_vs_float64_db) = as_double(v);
  }
  if (c.contains("failed") && !c["failed"].is_string()) throw bad("failed", "the reason as a string");
  if (c.contains("invalid") && !c["invalid"].is_boolean()) throw bad("invalid", "true or false");
  e.failed = c.value("failed", "");
  e.invalid = c.value("invalid", false);
  return {c["line"].get<std::string>(), e};
}

// A fit finds one kernel's recipe: the files must hold one kernel's outputs, each (layer, context) once.
void check_one_kernel(const std::vector<OutputsFile>& files, int n_tokens) {
  std::map<std::pair<std::string, int>, std::string> seen;
  for (const OutputsFile& f : files) {
    if (f.kernel != files.front().kernel) {
      throw std::invalid_argument("fit: " + f.path + " holds kernel '" + f.kernel + "' and " + files.front().path + " kernel '" + files.front().kernel +
                                  "'; expected the outputs of one kernel (fit each kernel on its own)");
    }
    for (const LayerOutputs& l : f.layers) {
      const int context = l.context > 0 ? l.context : n_tokens;
      const auto [it, fresh] = seen.emplace(std::make_pair(l.layer, context), f.path);
      if (!fresh) {
        throw std::invalid_argument("fit: " + f.path + ": layer " + l.layer + " context " + std::to_string(context) + " is given twice (also in " +
                                    it->second + "); expected each (layer, context) once");
      }
    }
  }
}

// The units, each on its sampled rows: the float64 reference once, the kernel's outputs picked;
// both pooled over units and heads, as the search compares them.
struct FitUnits {
  std::vector<FitUnit> units;
  std::vector<double> ref, kernel;
};

FitUnits load_units(const FitOptions& opt, const DatasetInfo& info, const std::vector<OutputsFile>& files) {
  FitUnits all;
  for (const OutputsFile& f : files) {
    for (const LayerOutputs& l : f.layers) {
      FitUnit u;
      u.file = f.path;
      u.layer = l.layer;
      u.context = l.context > 0 ? l.context : info.n_tokens;
      SliceRequest req;
      req.tokens = u.context;
      u.slice = load_layer(info, l.layer, req);
      const int have = static_cast<int>(l.rows.size());
      std::vector<int> pick;  // positions in the file's rows
      if (opt.rows > 0 && opt.rows < have) {
        pick = RowSelection::sample_of(opt.rows, opt.seed).resolve(have);
        std::sort(pick.begin(), pick.end());
      } else {
        for (int i = 0; i < have; ++i) pick.push_back(i);
      }
      std::vector<int> rows;
      for (int i : pick) rows.push_back(l.rows[static_cast<std::size_t>(i)]);
      u.slice.problem.rows = RowSelection::list_of(rows);
      const int hq = l.o.heads, d = l.o.dim;
      for (int h = 0; h < hq; ++h)
        for (int i : pick)
          for (int c = 0; c < d; ++c) u.kernel.push_back(l.o(h, i, c));
      const ReferenceResult ref = reference_attention(u.slice.problem, {});
      all.ref.insert(all.ref.end(), ref.out.data.begin(), ref.out.data.end());
      all.kernel.insert(all.kernel.end(), u.kernel.begin(), u.kernel.end());
      all.units.push_back(std::move(u));
    }
  }

  return all;
}

// Where the best recipe's remaining distance sits against the emulator's own floor (order_floor_db).
std::string floor_text(const FitResult& result, const FitStep& b) {
  if (std::isinf(b.kernel_vs_recipe_db)) return "";
  if (std::isinf(result.floor_db)) {
    return result.floor_gemms > 0
               ? "The emulator's own floor here is out of reach: its float GEMMs summed in fp32 or exactly give the same outputs on these rows.\n\n"
               : "No float GEMM of this recipe sums in fp32 or exactly, so the lab has no summation-order floor to set the remaining distance against.\n\n";
  }
  const std::string floor = fmt::format("The emulator's own floor here (its float GEMMs summed in fp32 against exactly; of Q K^T and P V the one that "
                                        "moves the outputs more): {} dB. ",
                                        db_text(result.floor_db));
  if (b.kernel_vs_recipe_db > result.floor_db + kFloorSlackDb) {
    return floor + "The kernel is nearer the recipe than that: the recipe's order of sums is the kernel's, or hides its differences here.\n\n";
  }
  if (result.at_floor) {
    return floor + "The remaining distance sits at that floor: what is left is the kernel's own order of sums inside a GEMM, which the recipe "
                   "language names only as fp32 or exact, not a knob the search missed.\n\n";
  }
  return floor + fmt::format("The remaining distance is {} dB short of it: the kernel does something the recipe language does not say.\n\n",
                             db_text(result.floor_db - b.kernel_vs_recipe_db));
}

// The report: fit.json (the path, the ranking, the verdict); returns summary.md.
std::string write_fit_report(const FitOptions& opt, const FitResult& result, const Recipe& start, std::size_t n_units, const fs::path& dir) {
  const auto step_json = [](const FitStep& s) {
    return json{{"knob", s.knob}, {"line", s.line}, {"kernel_vs_recipe_db", num(s.kernel_vs_recipe_db)}, {"recipe_vs_float64_db", num(s.recipe_vs_float64_db)}};
  };
  json out = {{"best", result.path.back().line}, {"meets_rule", result.meets_rule}, {"rule_db", kFitRuleDb}, {"floor_db", num(result.floor_db)},
              {"at_floor", result.at_floor}, {"evaluated", result.evaluated},
              {"budget_spent", result.budget_spent}, {"seconds", result.seconds}, {"skipped", result.skipped}, {"skipped_why", result.skipped_why},
              {"path", json::array()}, {"ranked", json::array()}};
  for (const FitStep& s : result.path) out["path"].push_back(step_json(s));
  for (const FitStep& s : result.ranked) out["ranked"].push_back(step_json(s));
  write_atomic(dir / "fit.json", out.dump(2) + "\n");
  const FitStep& b = result.path.back();
  std::string md = "# Fit: " + md_text(dir.filename().string()) + "\n\nThe recipe nearest the kernel's outputs (" + std::to_string(n_units) +
                   " units of " + md_code(opt.dataset) + ", " + (opt.rows > 0 ? std::to_string(opt.rows) + " sampled rows each" : std::string("every row")) +
                   "), found by a beam search (" + std::to_string(opt.beam) + " recipes a step) over single-knob moves from " + md_code(to_string(start)) + ".\n\n" +
                   fmt::format("Best: kernel vs recipe {} dB, recipe vs float64 {} dB: the kernel is {} dB nearer the recipe than the recipe is to "
                               "float64; the rule asks {:.0f}: **{}**.\n\n",
                               db_text(b.kernel_vs_recipe_db), db_text(b.recipe_vs_float64_db), db_text(rule_margin({b.kernel_vs_recipe_db, b.recipe_vs_float64_db, ""})),
                               kFitRuleDb, result.meets_rule ? "meets the rule" : "does not meet the rule") +
                   "    " + b.line + "\n\n" + floor_text(result, b) + "The knobs that moved the distance, in the order taken:\n\n| step | knob | kernel vs recipe dB | gain dB | recipe vs float64 dB |\n|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < result.path.size(); ++i) {
    const FitStep& s = result.path[i];
    md += fmt::format("| {} | {} | {} | {} | {} |\n", i, md_text(s.knob), db_text(s.kernel_vs_recipe_db),
                      i == 0 ? std::string("-") : db_text(s.kernel_vs_recipe_db - result.path[i - 1].kernel_vs_recipe_db), db_text(s.recipe_vs_float64_db));
  }
  md += "\nThe nearest recipes evaluated:\n\n| rank | kernel vs recipe dB | recipe vs float64 dB | margin dB | reached by | recipe |\n|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < result.ranked.size(); ++i) {
    const FitStep& s = result.ranked[i];
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", i + 1, db_text(s.kernel_vs_recipe_db), db_text(s.recipe_vs_float64_db),
                      db_text(s.kernel_vs_recipe_db - s.recipe_vs_float64_db), md_text(s.knob), md_code(s.line));
  }
  md += fmt::format("\n{} recipes emulated in {:.0f} s{}.\n", result.evaluated, result.seconds,
                    result.budget_spent ? " (the time budget ran out: the search stopped early; --resume continues it)" : "");
  if (result.skipped > 0) {
    md += fmt::format("\n{} recipes the search made do not apply to this input and were skipped; why:\n\n", result.skipped);
    for (const std::string& why : result.skipped_why) md += "- " + md_text(why) + "\n";
  }
  return md;
}

// A beam search from one recipe: each step expands the `beam` nearest recipes of the last step
// by every single-knob move and keeps the `beam` nearest new ones; it stops when a step brings the
// best no nearer than min_gain_db (or the budget runs out). One recipe per step would be a greedy
// descent, which a move toward float64 can trap: an unquantized recipe is as near a kernel as the
// kernel is to float64, a local optimum the kernel's own recipe must climb out of.
class Search {
 public:
  // cache: the evaluations a resumed report holds (candidates.jsonl); each new one is appended there.
  // t0: when the fit began (its budget counts from there).
  Search(const FitOptions& opt, const FitUnits& units, std::filesystem::path dir, std::map<std::string, Evaluation> cache,
         std::chrono::steady_clock::time_point t0)
      : opt_(opt), units_(units), dir_(std::move(dir)), cache_(std::move(cache)), kernel_vs_float64_db_(compare(units.ref, units.kernel).sqnr_db), t0_(t0) {}

  FitResult run(const Recipe& start) {
    const Evaluation first = evaluate(start);
    if (!first.failed.empty()) throw std::invalid_argument("fit: the starting recipe has no output to compare: " + first.failed);
    knob_of_[to_string(start)] = "start";
    if (!opt_.quiet) fmt::print(stderr, "fit: {} units, {} outputs; start: kernel vs recipe {} dB (recipe vs float64 {} dB)\n", units_.units.size(),
                               units_.kernel.size(), db_text(first.kernel_vs_recipe_db), db_text(first.recipe_vs_float64_db));
    std::vector<FitMove> restarts;
    State found = descend({start, first, {{"start", to_string(start), first.kernel_vs_recipe_db, first.recipe_vs_float64_db}}}, &restarts);
    // Where the search stops, a move into another family of recipes (another softmax) starts a
    // search of its own from the best recipe; the nearer end is kept, with the move in its path.
    for (const FitMove& m : restarts) {
      if (result_.budget_spent) break;
      Recipe r;
      try {
        r = recipe_from_string(m.line);
      } catch (const std::invalid_argument&) {
        continue;
      }
      const Evaluation e = evaluate(r);
      knob_of_.emplace(to_string(r), m.knob);
      if (!e.failed.empty()) continue;
      std::vector<FitStep> path = found.path;
      path.push_back({m.knob, to_string(r), e.kernel_vs_recipe_db, e.recipe_vs_float64_db});
      if (!opt_.quiet) fmt::print(stderr, "fit: trying {} ({} dB), then a search from there\n", m.knob, db_text(e.kernel_vs_recipe_db));
      State end = descend({r, e, std::move(path)}, nullptr);
      if (steer(end.eval) > steer(found.eval) + opt_.min_gain_db) found = std::move(end);
    }
    result_.path = found.path;
    const Evaluation now = found.eval;
    result_.meets_rule = rule_margin(now) >= kFitRuleDb;
    result_.floor_db = order_floor_db(found.recipe, result_.floor_gemms);
    result_.at_floor = std::abs(now.kernel_vs_recipe_db - result_.floor_db) <= kFloorSlackDb;
    std::vector<std::pair<std::string, Evaluation>> all(cache_.begin(), cache_.end());
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second.kernel_vs_recipe_db > b.second.kernel_vs_recipe_db; });
    for (const auto& [line, e] : all) {
      if (static_cast<int>(result_.ranked.size()) >= opt_.top) break;
      if (!e.failed.empty()) continue;
      const auto k = knob_of_.find(line);
      result_.ranked.push_back({k == knob_of_.end() ? "(an earlier run)" : k->second, line, e.kernel_vs_recipe_db, e.recipe_vs_float64_db});
    }
    result_.seconds = elapsed();
    for (const auto& [line, e] : cache_) {
      if (!e.invalid) continue;
      ++result_.skipped;
      if (result_.skipped_why.size() < 5 && std::find(result_.skipped_why.begin(), result_.skipped_why.end(), e.failed) == result_.skipped_why.end())
        result_.skipped_why.push_back(e.failed);
    }

    return result_;
  }

 private:
  struct State {
    Recipe recipe;
    Evaluation eval;
    std::vector<FitStep> path;
  };

  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  // The distance the search steers by (kAccuracySlackDb).
  double steer(const Evaluation& e) const {
    return e.kernel_vs_recipe_db - std::max(0.0, e.recipe_vs_float64_db - kernel_vs_float64_db_ - kAccuracySlackDb);
  }

  // The recipe's emulation on every unit, pooled over units and heads as the kernel's outputs are.
  std::vector<double> outputs(const Recipe& r) const {
    std::vector<double> all;
    all.reserve(units_.ref.size());
    for (const FitUnit& u : units_.units) {
      const EmulatorResult emu = emulate(u.slice.problem, r);
      all.insert(all.end(), emu.out.data.begin(), emu.out.data.end());
    }
    return all;
  }

  // The emulator's own floor at a recipe: how far apart its outputs go when a float GEMM's sum is
  // taken in another honest order (fp32 key after key, or exact), the lower of the two GEMMs' (the
  // order that moves the outputs more). A kernel's own inner order (a BLAS's blocking, a matrix
  // unit's) is one more such order, so a distance near this floor is not a knob the search missed.
  // Each GEMM on its own: one that sums integers, or sums under a matrix unit's measured model, or
  // whose other order this input cannot take, adds nothing. measured: how many GEMMs it compared
  // (+inf with measured > 0: the two orders give the same outputs here).
  double order_floor_db(const Recipe& r, int& measured) const {
    using AccKind = Accumulator::Kind;
    measured = 0;
    double floor = INFINITY;
    std::vector<double> own;
    try {
      own = outputs(r);
    } catch (const NumericFailure&) {
      return INFINITY;
    }
    const bool int_qk = format_of(r.q.spec.format).kind == Kind::integer;  // validate: Q and K alike
    for (Accumulator Recipe::*acc : {&Recipe::qk_acc, &Recipe::pv_acc}) {
      if ((r.*acc).kind != AccKind::fp32 && (r.*acc).kind != AccKind::exact) continue;
      if (acc == &Recipe::qk_acc && int_qk) continue;  // integer sums are exact in any order
      Recipe other = r;
      (other.*acc).kind = (r.*acc).kind == AccKind::fp32 ? AccKind::exact : AccKind::fp32;
      try {
        floor = std::min(floor, compare(own, outputs(other)).sqnr_db);
        ++measured;
      } catch (const NumericFailure&) {
      } catch (const std::invalid_argument&) {  // the other order is not a valid recipe here (an integer softmax's sums)
      }
    }
    return floor;
  }

  // The recipe's emulation on every unit against the kernel (and float64), pooled over units and heads.
  Evaluation evaluate(const Recipe& r) {
    const std::string line = to_string(r);
    if (const auto it = cache_.find(line); it != cache_.end()) return it->second;
    if (opt_.between_evaluations) opt_.between_evaluations();
    Evaluation e;
    try {
      const std::vector<double> emu_all = outputs(r);
      e.recipe_vs_float64_db = compare(units_.ref, emu_all).sqnr_db;
      e.kernel_vs_recipe_db = compare(emu_all, units_.kernel).sqnr_db;
    } catch (const NumericFailure& f) {
      e = Evaluation{};
      e.failed = f.what();
    } catch (const std::invalid_argument& f) {
      // A move the search made itself that this input cannot take (a group of 32 on head dim 80):
      // skipped and counted, never the end of the search.
      e = Evaluation{};
      e.failed = f.what();
      e.invalid = true;
    }
    ++result_.evaluated;
    cache_[line] = e;
    json row = {{"line", line}, {"kernel_vs_recipe_db", num(e.kernel_vs_recipe_db)}, {"recipe_vs_float64_db", num(e.recipe_vs_float64_db)}};
    if (!e.failed.empty()) row["failed"] = e.failed;
    if (e.invalid) row["invalid"] = true;
    append_durable(dir_ / "candidates.jsonl", row.dump() + "\n");
    return e;
  }

  State descend(State from, std::vector<FitMove>* restarts) {
    State best = from;
    std::vector<State> beam = {std::move(from)};
    std::set<std::string> expanded;
    while (!std::isinf(best.eval.kernel_vs_recipe_db) && !result_.budget_spent) {
      std::vector<State> pool;
      std::set<std::string> in_pool;
      for (const State& st : beam) {
        expanded.insert(to_string(st.recipe));
        const std::vector<FitMove> moves = fit_moves(st.recipe);
        Progress progress(static_cast<double>(moves.size()), moves.size(), opt_.quiet, false);
        for (const FitMove& m : moves) {
          if (elapsed() > opt_.budget_s) {
            result_.budget_spent = true;
            break;
          }
          if (m.restart) {  // judged by a search of its own, after this one ends
            if (restarts && &st == &beam.front()) restarts->push_back(m);
            continue;
          }
          Recipe next;
          try {
            next = recipe_from_string(m.line);
          } catch (const std::invalid_argument&) {  // a move the recipe language does not allow here
            progress.step(m.knob + ": not a valid recipe", 1);
            continue;
          }
          const std::string line = to_string(next);
          const Evaluation x = evaluate(next);
          knob_of_.emplace(line, m.knob);
          progress.step(fmt::format("{}: {} dB", m.knob, db_text(x.kernel_vs_recipe_db)), 1);
          if (!x.failed.empty() || expanded.count(line) || !in_pool.insert(line).second) continue;
          std::vector<FitStep> path = st.path;
          path.push_back({m.knob, line, x.kernel_vs_recipe_db, x.recipe_vs_float64_db});
          pool.push_back({next, x, std::move(path)});
        }
      }
      std::stable_sort(pool.begin(), pool.end(), [&](const State& a, const State& b) { return steer(a.eval) > steer(b.eval); });
      if (pool.empty() || !(steer(pool.front().eval) > steer(best.eval) + opt_.min_gain_db)) break;
      if (restarts) restarts->clear();  // the restarts of the new best's family are collected next step
      best = pool.front();
      if (pool.size() > static_cast<std::size_t>(opt_.beam)) pool.resize(static_cast<std::size_t>(opt_.beam));
      beam = std::move(pool);
      if (!opt_.quiet) {
        fmt::print(stderr, "fit: step {}: {} -> kernel vs recipe {} dB (recipe vs float64 {} dB; {} recipes in {:.0f} s)\n", best.path.size() - 1,
                   best.path.back().knob, db_text(best.eval.kernel_vs_recipe_db), db_text(best.eval.recipe_vs_float64_db), result_.evaluated, elapsed());
      }
    }
    if (restarts && restarts->empty() && !result_.budget_spent) {
      for (const FitMove& m : fit_moves(best.recipe))
        if (m.restart) restarts->push_back(m);
    }
    return best;
  }

  const FitOptions& opt_;
  const FitUnits& units_;
  std::filesystem::path dir_;
  std::map<std::string, Evaluation> cache_;
  std::map<std::string, std::string> knob_of_;  // canonical line -> the move that first reached it
  FitResult result_;
  double kernel_vs_float64_db_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

FitResult fit_recipe(const FitOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(opt);
  const DatasetInfo info = open_dataset(opt.dataset);
  const std::vector<OutputsFile> files = read_outputs_of_dump(info, opt.dataset, opt.outputs);
  check_one_kernel(files, info.n_tokens);
  const std::string first_line = start_line(opt, files);
  Recipe start;
  try {
    start = recipe_from_string(first_line);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument((opt.start.empty() ? files.front().path + ": attribute 'recipe'" : std::string("fit --from")) + ": " + e.what());
  }

  const FitUnits loaded = load_units(opt, info, files);

  const fs::path dir(opt.output);
  const ReportRun report(dir, existing_for("fit", opt.force, opt.resume), true);
  json inputs = json::array();
  for (const OutputsFile& f : files) inputs.push_back({{"file", f.path}, {"kernel", f.kernel}, {"fnv1a64", fmt::format("{:016x}", fnv1a_file(f.path))}});
  json config = dataset_provenance(opt.dataset, info.attrs.at("model").s);
  config.update(json{{"kind", "fit"}, {"outputs", inputs}, {"rows", opt.rows}, {"seed", opt.seed}, {"start", to_string(start)},
                     {"budget_s", opt.budget_s}, {"min_gain_db", opt.min_gain_db}, {"beam", opt.beam}});
  // A resumed fit reuses the evaluations of the same units (dump, outputs, rows and seed).
  report.refuse_changed(config, {"kind", "dataset_fnv1a64", "outputs", "rows", "seed"},
                        "a fit of other units ({} changed) or another report; --resume would mix them: use --force or another output");
  std::map<std::string, Evaluation> cache;
  // Only under a config.json that was just checked to match: evaluations without one carry no identity.
  if (report.resuming() && !report.previous_config().is_null()) {
    const std::vector<json> rows = read_log(dir / "candidates.jsonl");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto [line, e] = cached_evaluation(rows[i], (dir / "candidates.jsonl").string() + ": line " + std::to_string(i + 1));
      cache[line] = e;
    }
  }
  report.write_config(config, opt.command_line);

  const FitResult result = Search(opt, loaded, dir, std::move(cache), t0).run(start);
  const std::string md = write_fit_report(opt, result, start, loaded.units.size(), dir);
  report.finish(md, {.files = "summary.md, fit.json, candidates.jsonl, config.json", .print = !opt.quiet});
  return result;
}

}  // namespace qattn
