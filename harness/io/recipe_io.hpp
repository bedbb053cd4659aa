#pragma once
// The recipe's two text forms, which round-trip:
//   one line:  q=int8/token k=int8/token ksmooth=global p=e4m3/static:448 v=e4m3/channel acc.pv=fp32
//   JSON:      {"q": "int8/token", "k": {"format": "int8", "granularity": "token"}, "ksmooth": "global", ...}
// Operand: FORMAT[/GRANULARITY[:N]][/static:S][/scale:FORMAT]; a bare float format ("fp32", "bf16")
// is plain rounding without a scale. Accumulator: exact | fp32 | fp16 |
// mma(chunk=32,align=32,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=0).
// Every key of the line form is also a JSON key; omitted keys keep their defaults (README lists them).
// The keys, operand modifiers and their forms are the knob table's (kernels/recipe/knobs.hpp).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/recipe/presets.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn {

// Parse errors throw std::invalid_argument naming the token or key, and what was expected; the
// result is validated (validate(const Recipe&)).
Recipe recipe_from_string(const std::string& line);
Recipe recipe_from_json(const nlohmann::json& j, const std::string& where = "recipe");
std::string to_string(const Recipe& r);     // canonical: every key, fixed order
nlohmann::json to_json(const Recipe& r);    // the same keys, operands and accumulators as strings

std::string operand_to_string(const OperandQuant& o);

OperandQuant operand_from_string(const std::string& s, const std::string& what);

}  // namespace qattn
