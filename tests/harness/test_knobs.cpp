// The knob table (kernels/recipe/knobs.cpp): every row's example moves its knob and round-trips;
// each row owns its fields (resetting every row leaves Recipe{}); and the GPU's coverage whitelist
// refuses, for every family, each knob or modifier the family does not declare. The GPU side of the
// walk (a declared knob is proven against the emulator or refused by the family's own rule) is
// tests/gpu/test_coverage.cpp.
#include <set>
#include <string>

#include "harness/io/recipe_io.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/presets.hpp"
#include "tests/catch.hpp"

using namespace qattn;

namespace {

// Every knob and modifier away from its default in r that `family` does not declare.
int undeclared_count(const Recipe& r, GpuFamily family) {
  int n = 0;
  for (const RecipeKnob& k : recipe_knobs()) n += knob_differs(k, r) && !(k.gpu & family_bit(family));
  for (const OperandQuant* o : {&r.q, &r.k, &r.p, &r.v})
    for (const OperandModifier& m : operand_modifiers()) n += m.present(o->spec) && !(m.gpu & family_bit(family));
  return n;
}

// The walk: for every family, the recipe is refused exactly when it moves an undeclared knob, and the
// refusal names one. A row whose reset misses a field leaves that field unowned: every family then
// refuses even where the count says it declares all, and this fails.
void check_whitelist(const Recipe& r) {
  for (GpuFamily f : kGpuFamilies) {
    INFO("family " << name_of(f) << ", recipe " << to_string(r));
    const std::string why = undeclared_knob(r, f);
    if (undeclared_count(r, f) == 0) {
      CHECK(why.empty());
    } else {
      CHECK_FALSE(why.empty());
      CHECK(why.find("no row of the knob table") == std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("knob table: every knob's example moves it, round-trips and walks the GPU whitelist", "[knobs]") {
  for (const RecipeKnob& k : recipe_knobs()) {
    INFO("knob " << k.name << ": " << k.example);
    const Recipe r = recipe_from_string(k.example);
    CHECK(knob_differs(k, r));
    CHECK(to_string(recipe_from_string(to_string(r))) == to_string(r));
    CHECK(to_string(recipe_from_json(to_json(r))) == to_string(r));
    check_whitelist(r);
    // A family that does not declare the knob refuses the recipe.
    for (GpuFamily f : kGpuFamilies) {
      INFO("family " << name_of(f));
      if (!(k.gpu & family_bit(f))) CHECK_FALSE(undeclared_knob(r, f).empty());
    }
  }
}

TEST_CASE("knob table: every operand modifier's example sets it, round-trips and walks the GPU whitelist", "[knobs]") {
  for (const OperandModifier& m : operand_modifiers()) {
    INFO("modifier /" << m.head << " " << (m.arg ? m.arg : "") << ": " << m.example);
    const Recipe r = recipe_from_string(m.example);
    bool present = false;
    for (const OperandQuant* o : {&r.q, &r.k, &r.p, &r.v}) present = present || m.present(o->spec);
    CHECK(present);
    CHECK(to_string(recipe_from_json(to_json(r))) == to_string(r));
    check_whitelist(r);
    for (GpuFamily f : kGpuFamilies) {
      INFO("family " << name_of(f));
      if (!(m.gpu & family_bit(f))) CHECK(undeclared_knob(r, f).find(std::string("/") + m.head) != std::string::npos);
    }
  }
}

TEST_CASE("knob table: the rows own every field the presets set", "[knobs]") {
  // A family that declared every knob would take every preset: nothing they set is outside the table.
  for (const RecipePreset& p : recipe_presets()) {
    INFO("preset " << p.name);
    const Recipe r = recipe_from_string(std::string("preset=") + p.name);
    check_whitelist(r);
  }
}

TEST_CASE("knob table: the whitelist names the knob a family does not declare", "[knobs]") {
  const Recipe pad = recipe_from_string("q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_mma pad=zero");
  for (GpuFamily f : kGpuFamilies) CHECK(undeclared_knob(pad, f) == "pad=zero");
  const Recipe rev = recipe_from_string("q=int8/token k=int8/token p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_mma order=reverse");
  for (GpuFamily f : kGpuFamilies) CHECK(undeclared_knob(rev, f) == (f == GpuFamily::dot4 ? "" : "order=reverse"));
  const Recipe qsmooth = recipe_from_string("q=int8/token k=int8/token qsmooth=1");
  CHECK(undeclared_knob(qsmooth, GpuFamily::dot4).empty());
  CHECK(undeclared_knob(qsmooth, GpuFamily::mma) == "qsmooth=1");
  const Recipe eps = recipe_from_string("q=int8/token/eps:1e-07 k=int8/token");
  CHECK(undeclared_knob(eps, GpuFamily::dot4).empty());
  CHECK(undeclared_knob(eps, GpuFamily::integer) == "q: /eps:1e-07");
  const Recipe scale = recipe_from_string("q=int8/token/scale:fp16 k=int8/token");
  CHECK(undeclared_knob(scale, GpuFamily::dot4).empty());
  // Recipe{} moves nothing.
  for (GpuFamily f : kGpuFamilies) CHECK(undeclared_knob(Recipe{}, f).empty());
}

TEST_CASE("knob table: names are unique and fit ranks its knobs", "[knobs]") {
  std::set<std::string> names;
  for (const RecipeKnob& k : recipe_knobs()) {
    INFO(k.name);
    CHECK(names.insert(k.name).second);
    CHECK(find_knob(k.name) == &k);
    if (k.fit_values != nullptr) CHECK(k.fit_order > 0);
  }
  CHECK(find_knob("nope") == nullptr);
}
