#pragma once
// Text pieces of the recipe's two forms, shared by the knob table (knobs.cpp) and the line and JSON
// readers (harness/io/recipe_io): numbers, enums, an operand (FORMAT[/GRANULARITY[:N]][/MODIFIER...])
// and an accumulator (a name or mma(...)). Every error is a std::invalid_argument "WHAT: why".
#include <string>
#include <utility>
#include <vector>

#include "kernels/recipe/recipe.hpp"

namespace qattn::recipe_text {

[[noreturn]] void bad(const std::string& what, const std::string& why);

std::vector<std::string> split(const std::string& s, char sep);  // "a/b/" -> a, b, ""
double parse_number(const std::string& s, const std::string& what);
int parse_int(const std::string& s, const std::string& what);  // -1e9..1e9
std::string num(double v);  // the shortest text that reads back as the same double

template <typename E, std::size_t N>
E parse_enum(const std::string& s, const std::string& what, const std::pair<const char*, E> (&names)[N]) {
  std::string known;
  for (const auto& [n, e] : names) {
    if (s == n) return e;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  bad(what, "unknown value '" + s + "'; expected one of: " + known);
}

template <typename E, std::size_t N>
std::string enum_name(E e, const std::pair<const char*, E> (&names)[N]) {
  for (const auto& [n, v] : names)
    if (v == e) return n;
  return "?";
}

inline constexpr std::pair<const char*, bool> kBool[] = {{"0", false}, {"1", true}, {"false", false}, {"true", true}};
inline constexpr std::pair<const char*, Rounding> kRounding[] = {{"even", Rounding::nearest_even}, {"zero", Rounding::toward_zero}};

std::string accumulator_to_string(const Accumulator& a);
Accumulator accumulator_from_string(const std::string& s, const std::string& what);

std::string operand_to_string(const OperandQuant& o);
OperandQuant operand_from_string(const std::string& s, const std::string& what);

}  // namespace qattn::recipe_text
