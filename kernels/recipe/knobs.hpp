#pragma once
// The recipe's knobs, declared once. Per knob: its name (the key of both text forms: `name=value` in a
// line, "name": "value" in JSON), how its text sets the recipe and how the recipe prints it, whether
// the canonical forms write it, which fields it owns (reset to Recipe{}'s), the values `qattn fit`
// tries from a recipe, a value away from its default, the GPU kernel families that implement it, and
// its validity rule.
// An operand's modifiers (/scale:F, /div, /amax:mul, ...) are a second table of the same kind.
//
// Everything derives from these rows: harness/io/recipe_io reads and writes both text forms through
// them, harness/experiment/fit_moves takes its moves from them, and the GPU's coverage is a whitelist
// over them: a knob or modifier away from its default is refused by every family that does not
// declare it, and a recipe field that no row owns is refused by every family (undeclared_knob).
// A new knob: a field in recipe.hpp, a row in knobs.cpp (with its rule), its emulation, and the
// families that implement it.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/recipe/recipe.hpp"

namespace qattn {

// The GPU kernel families (kernels/gpu/<family>/), as the tables declare what each implements.
enum class GpuFamily : std::uint8_t { mma, wgmma, decode, integer, dot4 };
inline constexpr GpuFamily kGpuFamilies[] = {GpuFamily::mma, GpuFamily::wgmma, GpuFamily::decode, GpuFamily::integer, GpuFamily::dot4};
const char* name_of(GpuFamily f);  // "mma", "wgmma", ...

using FamilySet = std::uint8_t;
constexpr FamilySet family_bit(GpuFamily f) { return static_cast<FamilySet>(1u << static_cast<unsigned>(f)); }
inline constexpr FamilySet kNoFamily = 0;
inline constexpr FamilySet kEveryFamily = 0x1f;

struct RecipeKnob {
  const char* name;
  void (*set)(Recipe& r, const std::string& value, const std::string& what);  // throws naming `what`
  std::string (*get)(const Recipe& r);
  bool (*written)(const Recipe& r);  // whether the canonical forms write it; nullptr: always
  void (*reset)(Recipe& r);          // the fields it owns back to Recipe{}'s
  // The values fit tries from r (each one move; the current value is skipped); nullptr: none.
  std::vector<std::string> (*fit_values)(const Recipe& r);
  // Where fit tries it among the others (ascending; a tie in distance goes to the earlier move).
  int fit_order;
  const char* example;  // a recipe line that moves it from its default (the coverage test walks these)
  FamilySet gpu;        // families that implement it (each still refuses the values it cannot take)
  // Its validity rule: throws std::invalid_argument ("recipe field 'F': why") where r's value of the
  // knob is out of range or does not combine with the knobs it depends on; nullptr: any value holds.
  // validate(r) is these rules, row by row.
  void (*check)(const Recipe& r) = nullptr;
};

// An operand modifier: /HEAD:ARG in the line form, JSON key `json_key` in an operand object.
struct OperandModifier {
  const char* head;  // "scale", "div", "amax", ...
  const char* arg;   // a flag's fixed argument ("mul", "signed", "fp32", "away"); nullptr: the argument is a value
  const char* json_key;
  enum class Json : std::uint8_t { flag, number, text } json;
  const char* meaning;                                   // for errors: what the modifier does
  bool (*present)(const QuantSpec& s);
  std::string (*value)(const QuantSpec& s);              // the argument as written (value modifiers)
  void (*set)(QuantSpec& s, const std::string& arg, const std::string& what, const std::string& text);  // text: the operand, for messages
  void (*reset)(QuantSpec& s);
  const char* fit[2];  // the forms fit toggles on an operand with a scale ("scale:fp16"); nullptr-padded
  const char* example;  // a recipe line that uses it (the coverage test sets it)
  FamilySet gpu;
};

std::span<const RecipeKnob> recipe_knobs();      // canonical order (how to_string writes them)
std::span<const OperandModifier> operand_modifiers();  // canonical order (how an operand prints them)
const RecipeKnob* find_knob(std::string_view name);  // nullptr: no such knob

// Throws std::invalid_argument ("recipe field 'F': why") at the first row whose rule r breaks, in the
// table's order: every reader of a recipe (line, JSON, preset) and every engine calls it.
void validate(const Recipe& r);

// Whether r's value of the knob differs from Recipe{}'s.
bool knob_differs(const RecipeKnob& k, const Recipe& r);

// "" when `family` declares every knob and modifier at which r differs from Recipe{}; otherwise the
// first one it does not ("order=reverse", "q: /amax:mul"), or, when r differs in a field that no row
// owns, a sentence saying so (refusal by default: a new field is never silently ignored).
std::string undeclared_knob(const Recipe& r, GpuFamily family);

}  // namespace qattn
