#include "kernels/gpu/dispatch.hpp"

#include <cmath>
#include <stdexcept>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/recipe_text.hpp"  // operand_to_string

namespace qattn::gpu {

namespace {

// Runs a covered recipe on one family: fills `out` ([Hq, rows, d]) and returns the kernel that ran.
using FamilyRun = const char* (*)(const Problem& p, const Recipe& r, std::vector<float>& out);

// One kernel family as dispatch sees it. not_covered() and run() both walk kFamilies, in its order.
struct Family {
  GpuFamily id;                                               // its column in the knob table
  const char* name;                                           // in not_covered()'s message
  std::string (*not_covered)(const Problem&, const Recipe&);  // "" when the family takes the recipe's values
  FamilyRun run;                                              // null: not built here (not_covered says so)
};

// The families, first choice first. The NVIDIA-only ones (mma, wgmma) are rows in every build, so
// that not_covered() names them, but run only in the CUDA build. run() takes the first row whose
// not_covered is empty; the last row (dot4) is its fallback and is run without asking (callers ask
// not_covered() first). The fast decode path is for speed and is not dispatched.
#if defined(QATTN_WITH_CUDA)
constexpr FamilyRun kRunMma = run_mma, kRunWgmma = run_wgmma;
#else
constexpr FamilyRun kRunMma = nullptr, kRunWgmma = nullptr;
#endif
constexpr Family kFamilies[] = {
    {GpuFamily::mma, kMmaKernelName, mma_not_covered, kRunMma},
    {GpuFamily::wgmma, kWgmmaKernelName, wgmma_not_covered, kRunWgmma},
    {GpuFamily::decode, kDecodeKernelName, decode_not_covered, run_decode},
    {GpuFamily::integer, kIntegerKernelName, integer_not_covered, run_integer},
    {GpuFamily::dot4, kDot4KernelName, dot4_not_covered, run_dot4},
};

const Family& family_row(GpuFamily id) {
  for (const Family& f : kFamilies)
    if (f.id == id) return f;
  throw std::logic_error("dispatch: no row for a GPU family");
}

// The attention variants of a problem (soft-capping, sink logits, ALiBi, V's own head dim, chunks): no GPU family applies one yet, so
// every family refuses a problem that has one rather than run it as plain attention.
std::string variant_not_covered(const Problem& p) {
  if (p.softcap > 0) return "soft-capped logits (softcap " + std::to_string(p.softcap) + ") are not covered by any GPU family";
  if (!p.sinks.empty()) return "sink logits are not covered by any GPU family";
  if (!p.alibi.empty()) return "ALiBi slopes are not covered by any GPU family";
  if (p.v.dim != p.q.dim) {
    return "a value head dim (" + std::to_string(p.v.dim) + ") unlike Q/K's (" + std::to_string(p.q.dim) + ") is not covered by any GPU family";
  }
  if (p.chunk > 0) return "chunked attention (chunks of " + std::to_string(p.chunk) + " tokens) is not covered by any GPU family";
  return "";
}

// A family takes a recipe when it declares every knob the recipe moves (the knob table: refusal by
// default) and its own rule takes the values; tiles=fa3_sm90 is resolved to its tiles first.
std::string row_not_covered(const Family& f, const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  if (std::string why = variant_not_covered(p); !why.empty()) return why;
  if (std::string knob = undeclared_knob(r, f.id); !knob.empty()) return knob + ": not implemented by this family (knob table)";
  return f.not_covered(p, r);
}

}  // namespace

std::string family_not_covered(GpuFamily family, const Problem& p, const Recipe& r) { return row_not_covered(family_row(family), p, r); }

std::string not_covered(const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  if (std::string why = variant_not_covered(p); !why.empty()) return why;  // said once, not once a family
  // A knob no family declares: said once, not once a family.
  for (const RecipeKnob& k : recipe_knobs()) {
    if (k.gpu == kNoFamily && knob_differs(k, r)) return std::string(k.name) + "=" + k.get(r) + " is emulator-only (no GPU family implements it)";
  }
  for (const auto& [o, name] : {std::pair{&r.q, "q"}, std::pair{&r.k, "k"}, std::pair{&r.p, "p"}, std::pair{&r.v, "v"}}) {
    for (const OperandModifier& m : operand_modifiers()) {
      if (m.gpu == kNoFamily && m.present(o->spec)) {
        return std::string(name) + "=" + recipe_text::operand_to_string(*o) + ": /" + m.head + " is emulator-only (no GPU family implements it)";
      }
    }
  }
  // Every family's reason, in the table's order, unless one takes the recipe.
  std::string why;
  for (const Family& f : kFamilies) {
    const std::string reason = row_not_covered(f, p, r);
    if (reason.empty()) return "";
    if (!why.empty()) why += "; ";
    why += std::string(f.name) + ": " + reason;
  }
  return why;
}

GpuResult run(const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  for (const Family& f : kFamilies) {
    if (f.run != nullptr && row_not_covered(f, p, r).empty()) return run_family(f.id, p, r);
  }
  throw std::invalid_argument("no GPU kernel covers the recipe: " + not_covered(p, r));
}

GpuResult run_family(GpuFamily family, const Problem& p, const Recipe& recipe) {
  const Family& f = family_row(family);
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  if (f.run == nullptr) throw std::invalid_argument(std::string(f.name) + " is not built here");
  if (const std::string why = row_not_covered(f, p, r); !why.empty()) throw std::invalid_argument(std::string(f.name) + ": " + why);
  GpuResult res;
  const int rows = static_cast<int>(p.rows.resolve(p.q.tokens).size());
  res.out = TensorF(p.q.heads, rows, p.q.dim);
  res.kernel = f.run(p, kv_groups_for(r, p.q.heads, p.k.heads), res.out.data);  // kvhead scales as the emulator groups them
  return res;
}

}  // namespace qattn::gpu
