#include "harness/experiment/score.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "harness/experiment/progress.hpp"
#include "harness/experiment/aggregate.hpp"
#include "harness/experiment/report_run.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/unit_score.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/outputs_file.hpp"
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

// One (outputs file, layer): what is scored, resolved against the dump before any work.
struct Unit {
  std::string file, kernel, layer;
  int context = 0;
  bool has_recipe = false;
  Recipe recipe;
  std::string recipe_line;
  const LayerOutputs* out = nullptr;
};

// One scored unit, as the summary shows it.
struct Line {
  std::string kernel, layer, recipe_line;
  int context, heads, rows;
  UnitScore k, r, kr;  // kernel vs float64, recipe vs float64, kernel vs recipe (r and kr when compared)
  bool has_recipe;
  std::size_t equal = 0, outputs = 0;  // outputs whose bits equal the emulation's
  std::string failed;                  // why the recipe could not be compared with, if so
};

// The kernel's error fields against float64 (the CSV names them kernel_*), then the recipe's and
// the kernel-vs-recipe SQNR and relative L2.
constexpr Fields kKernel{kErrorFields.size(), 0}, kShort{2, 0};

void check_options(const ScoreOptions& opt) {
  if (opt.outputs.empty()) throw std::invalid_argument("score: no outputs file given; expected one or more qattn-outputs/1 files");
  if (opt.output.empty()) throw std::invalid_argument("score --output: empty; expected a report folder");
  need_utf8_path("score: the dump", opt.dataset);
  for (const std::string& f : opt.outputs) need_utf8_path("score: an outputs file", f);
  need_utf8_path("score --output", opt.output);
}

// The units of the outputs files, each (kernel, layer, context) once, with the recipe each names
// (or the one --recipe gives every file).
std::vector<Unit> units_of(const ScoreOptions& opt, const DatasetInfo& info, const std::vector<OutputsFile>& files) {
  std::vector<Unit> units;
  std::set<std::string> seen;
  for (const OutputsFile& f : files) {
    const std::string line = !opt.recipe.empty() ? opt.recipe : f.recipe;
    Recipe recipe;
    if (!line.empty()) {
      try {
        recipe = recipe_from_string(line);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument((opt.recipe.empty() ? f.path + ": attribute 'recipe'" : std::string("score --recipe")) + ": " + e.what());
      }
    }
    for (const LayerOutputs& l : f.layers) {
      Unit u;
      u.file = f.path;
      u.kernel = f.kernel;
      u.layer = l.layer;
      u.context = l.context > 0 ? l.context : info.n_tokens;
      u.has_recipe = !line.empty();
      u.recipe = recipe;
      u.recipe_line = u.has_recipe ? to_string(recipe) : "";
      u.out = &l;
      const std::string key = u.kernel + "|" + u.layer + "|" + std::to_string(u.context);
      if (!seen.insert(key).second) {
        throw std::invalid_argument(f.path + ": /layers/" + l.layer + ": kernel '" + u.kernel + "' layer " + l.layer + " context " +
                                    std::to_string(u.context) + " is given twice; expected each (kernel, layer, context) once");
      }
      units.push_back(u);
    }
  }

  return units;
}

// One unit: the kernel against float64, the recipe's emulation against float64 and the kernel against
// the emulation; its rows appended to results.jsonl (durably), its lines to the CSV and figure data.
Line score_one(const Unit& u, const DatasetInfo& info, const fs::path& dir, std::string& csv, std::string& figure, std::vector<json>& rows) {
  SliceRequest req;
  req.tokens = u.context;
  LayerSlice slice = load_layer(info, u.layer, req);
  Problem& p = slice.problem;
  p.rows = u.out->rows_listed || static_cast<int>(u.out->rows.size()) != u.context ? RowSelection::list_of(u.out->rows) : RowSelection::all_rows();
  const ReferenceResult ref = reference_attention(p, {});
  EmulatorResult emu;
  std::string recipe_failed;
  bool emulated = false;
  if (u.has_recipe) {
    try {
      emu = emulate(p, u.recipe);
      emulated = true;
    } catch (const NumericFailure& f) {
      recipe_failed = std::string("the recipe cannot be emulated on this input: ") + f.what();
    }
  }
  const int hq = p.q.heads, d = p.v.dim;  // outputs have V's head dim
  const std::size_t per_head = ref.rows.size() * static_cast<std::size_t>(d);
  // A recipe whose emulation has no defined output here (e.g. every P flushed: 0 / 0, or all
  // zeros) cannot be compared with: its columns are left empty with the reason, never NaN.
  if (emulated) {
    for (std::size_t x = 0; x < emu.out.data.size() && recipe_failed.empty(); ++x) {
      if (!std::isfinite(emu.out.data[x])) {
        recipe_failed = fmt::format("the recipe's emulation gives {} at head {}, row {}, channel {} (e.g. every P flushed)",
                                    std::isnan(emu.out.data[x]) ? "NaN" : "Inf", x / per_head, ref.rows[(x % per_head) / d], x % d);
      }
    }
    for (int h = 0; h < hq && recipe_failed.empty(); ++h) {
      bool zero = true;
      for (std::size_t x = h * per_head; x < (h + 1) * per_head && zero; ++x) zero = emu.out.data[x] == 0;
      if (zero) recipe_failed = fmt::format("the recipe's emulation is all zeros on head {}: no reference for the kernel's own error", h);
    }
  }
  if (!recipe_failed.empty()) fmt::print(stderr, "qattn: warning: {} layer {} context {}: {}\n", u.kernel, u.layer, u.context, recipe_failed);
  const bool compare_recipe = u.has_recipe && recipe_failed.empty();
  const std::vector<double> kern(u.out->o.data.begin(), u.out->o.data.end()), emu_d(emu.out.data.begin(), emu.out.data.end());
  std::vector<int> heads(static_cast<std::size_t>(hq));
  for (int h = 0; h < hq; ++h) heads[static_cast<std::size_t>(h)] = h;
  Line line{u.kernel, u.layer, u.recipe_line, u.context, hq, static_cast<int>(ref.rows.size()), {}, {}, {}, compare_recipe, 0, 0, recipe_failed};
  line.k = score_unit(ref.out.data, kern, heads);
  if (compare_recipe) {
    line.r = score_unit(ref.out.data, emu_d, heads);
    // The emulation is the reference of the kernel's own error (an all-zero head was refused above).
    line.kr = score_unit(emu_d, kern, heads);
  }
  std::string lines;
  for (int h = 0; h < hq; ++h) {
    const std::size_t hh = static_cast<std::size_t>(h);
    json row = {{"layer", layer_json(u.layer)}, {"head", h}, {"context", u.context}, {"recipe", u.kernel}, {"kernel", u.kernel},
                {"backend", "score"}, {"file", u.file}, {"rows", static_cast<int>(ref.rows.size())}, {"recipe_line", u.recipe_line}};
    put_fields(row, line.k.heads[hh], {kErrorFields.size(), 2});
    if (compare_recipe) {
      put_fields(row, line.r.heads[hh], kShort, "recipe_");
      put_fields(row, line.kr.heads[hh], kShort, "kernel_vs_recipe_");
      // Bit-equal outputs: the test of a bit-faithful emulation (as stored, fp32 bit patterns).
      std::size_t eq = 0;
      for (std::size_t x = hh * per_head; x < (hh + 1) * per_head; ++x) eq += std::bit_cast<std::uint32_t>(u.out->o.data[x]) == std::bit_cast<std::uint32_t>(emu.out.data[x]);
      row["kernel_equal_recipe"] = eq;
      line.equal += eq;
      line.outputs += per_head;
    } else {
      put_null_fields(row, kShort, "recipe_");
      put_null_fields(row, kShort, "kernel_vs_recipe_");
      row["kernel_equal_recipe"] = nullptr;
      if (!recipe_failed.empty()) row["recipe_failed"] = recipe_failed;
    }
    lines += row.dump() + "\n";
    rows.push_back(row);
    csv += fmt::format("{},{},{},{},{},{},{},{},{}\n", csv_text(u.layer), h, u.context, csv_text(u.kernel), csv_text(u.recipe_line), ref.rows.size(),
                       fields_cells(row, kKernel), fields_cells(row, kShort, "recipe_"), fields_cells(row, kShort, "kernel_vs_recipe_"));
    figure += fmt::format("{},{},{},{},{},{},{}\n", csv_text(u.layer), h, u.context, csv_text(u.kernel), fields_cells(row, {1, 0}),
                          fields_cells(row, {1, 0}, "recipe_"), fields_cells(row, {1, 0}, "kernel_vs_recipe_"));
  }
  append_durable(dir / "results.jsonl", lines);
  return line;
}

std::string summary_md(const ScoreOptions& opt, const DatasetInfo& info, const fs::path& dir, const std::vector<Line>& summary) {
  std::string md = "# Score: " + md_text(dir.filename().string()) + "\n\nDataset " + md_code(opt.dataset) + " (" + md_text(info.attrs.at("model").s) +
                   "). Per kernel, layer and context, SQNR in dB with the query heads pooled: the kernel against float64 "
                   "(its whole error), the recipe's emulation against float64 (what its formats cost) and the kernel against "
                   "the emulation (its own error beyond the formats; at least 30 dB above the recipe's error means the kernel "
                   "adds nothing measurable); worst head: the lowest per-head kernel-vs-float64 SQNR. results.csv has every head.\n\n"
                   "| kernel | layer | context | rows | heads | kernel vs float64 | worst head | recipe vs float64 | kernel vs recipe | bit-equal to recipe | recipe |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Line& l : summary) {
    DbMean heads;
    for (const HeadScore& h : l.k.heads) heads.add(h.error.sqnr_db);
    const double worst = heads.worst();
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_text(l.kernel), md_text(l.layer), l.context, l.rows, l.heads, db_text(l.k.pooled.error.sqnr_db),
                      db_text(worst), l.has_recipe ? db_text(l.r.pooled.error.sqnr_db) : (l.failed.empty() ? "-" : "failed: " + md_text(l.failed)),
                      l.has_recipe ? db_text(l.kr.pooled.error.sqnr_db) : "-",
                      l.has_recipe ? fmt::format("{} of {}", l.equal, l.outputs) : "-",
                      l.recipe_line.empty() ? "(none named)" : md_code(l.recipe_line));
  }
  return md;
}
}  // namespace

std::vector<OutputsFile> read_outputs_of_dump(const DatasetInfo& info, const std::string& dataset, const std::vector<std::string>& paths) {
  std::vector<OutputsFile> files;
  files.reserve(paths.size());
  for (const std::string& f : paths) {
    // Each layer's declared shape against the dump, before its outputs are read.
    const auto against_dump = [&](const std::string& layer, int heads, int, int dim, int context, int last_row) {
      const LayerInfo* dl = nullptr;
      try {
        dl = &info.layer(layer);
      } catch (const DatasetError&) {
        std::string known;
        for (const LayerInfo& x : info.layers) known += (known.empty() ? "" : ", ") + x.name;
        throw DatasetError(f + ": /layers/" + layer + ": the dump " + dataset + " has no such layer; expected one of " + known);
      }
      const std::string where = f + ": /layers/" + layer + "/o";
      if (heads != dl->q_heads) {
        throw DatasetError(where + ": " + std::to_string(heads) + " heads; the dump's layer has " + std::to_string(dl->q_heads) +
                           " query heads; expected one output per query head [Hq, R, d]");
      }
      if (dim != dl->v_dim) {
        throw DatasetError(where + ": head dim " + std::to_string(dim) + "; the dump's layer has V's head dim " + std::to_string(dl->v_dim) +
                           " (an output has V's head dim)");
      }
      const int ctx = context > 0 ? context : info.n_tokens;
      if (ctx > info.n_tokens) throw DatasetError(where + ": context " + std::to_string(ctx) + " tokens; the dump has " + std::to_string(info.n_tokens));
      if (last_row >= ctx) {
        throw DatasetError(f + ": /layers/" + layer + "/rows: row " + std::to_string(last_row) + " is outside the context of " + std::to_string(ctx) + " tokens");
      }
    };
    files.push_back(read_outputs(f, against_dump));
  }

  return files;
}

std::vector<json> score_outputs(const ScoreOptions& opt) {
  check_options(opt);
  const DatasetInfo info = open_dataset(opt.dataset);
  const std::vector<OutputsFile> files = read_outputs_of_dump(info, opt.dataset, opt.outputs);
  const std::vector<Unit> units = units_of(opt, info, files);

  const fs::path dir(opt.output);
  const ReportRun report(dir, existing_for("score", opt.force, false), false);
  json inputs = json::array();
  for (const OutputsFile& f : files) {
    inputs.push_back({{"file", f.path}, {"kernel", f.kernel}, {"recipe", f.recipe}, {"fnv1a64", fmt::format("{:016x}", fnv1a_file(f.path))}});
  }
  json config = dataset_provenance(opt.dataset, info.attrs.at("model").s);
  config.update(json{{"name", dir.filename().string()}, {"kind", "score"}, {"outputs", inputs}, {"recipe_override", opt.recipe}});
  report.write_config(config, opt.command_line);

  std::string csv = "layer,head,context,kernel,recipe_line,rows," + fields_header(kKernel, "kernel_") + "," + fields_header(kShort, "recipe_") + "," +
                    fields_header(kShort, "kernel_vs_recipe_") + "\n";
  std::string figure = "layer,head,context,kernel,kernel_vs_float64_db,recipe_vs_float64_db,kernel_vs_recipe_db\n";
  // A unit's cost for the ETA: its scored rows times the context's keys times its heads.
  const auto cost = [&](const Unit& u) { return static_cast<double>(u.out->rows.size()) * u.context * u.out->o.heads; };
  double total = 0;
  for (const Unit& u : units) total += cost(u);
  Progress progress(total, units.size(), !opt.progress);
  std::vector<Line> summary;
  std::vector<json> rows;
  for (const Unit& u : units) {
    if (opt.between_units) opt.between_units();
    summary.push_back(score_one(u, info, dir, csv, figure, rows));
    progress.step(fmt::format("{} layer {} ctx {}: {} dB", u.kernel, u.layer, u.context, db_text(summary.back().k.pooled.error.sqnr_db)), cost(u));
  }
  write_atomic(dir / "results.csv", csv);
  write_atomic(dir / "figures" / "score_per_head.csv", figure);
  static constexpr ReportKind kScore = ReportKind::score;
  report.finish(summary_md(opt, info, dir, summary),
                {.files = "summary.md, results.csv, results.jsonl, config.json, figures/", .figures = &kScore, .print = !opt.quiet,
                 .quiet_figures = opt.quiet});
  return rows;
}

}  // namespace qattn
