#include "harness/io/recipe_io.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "harness/io/text.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/recipe_text.hpp"

namespace qattn {

namespace {

// The user's text is echoed in errors; a token of kilobytes is shown by its start and length (a
// recipe token holds no space, the explanation no run of 100 characters without one).
std::string brief_tokens(const std::string& text) {
  constexpr std::size_t kLong = 100, kShown = 60;
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t end = std::min(text.find(' ', i), text.size());
    const std::size_t n = end - i;
    out += n > kLong ? text.substr(i, kShown) + "... (" + std::to_string(n) + " characters)" : text.substr(i, n);
    if (end < text.size()) out += ' ';
    i = end + 1;
  }
  return out;
}

[[noreturn]] void bad(const std::string& what, const std::string& why) { throw std::invalid_argument(brief_tokens(what + ": " + why)); }

// A JSON number that must be a whole count, as text for the one-line form.
std::string parse_text_int(double v, const std::string& what) {
  if (v != std::floor(v) || std::fabs(v) > 1e9) bad(what, "expected an integer, got " + std::to_string(v));
  return std::to_string(static_cast<long long>(v));
}

void set_key(Recipe& r, const std::string& key, const std::string& value, const std::string& what) {
  if (const RecipeKnob* k = find_knob(key)) return k->set(r, value, what);
  std::string known;
  std::vector<std::string> names;
  for (const RecipeKnob& k : recipe_knobs()) {
    known += (known.empty() ? "" : ", ") + std::string(k.name);
    names.emplace_back(k.name);
  }
  bad(what, "unknown key '" + key + "'" + did_you_mean(key, names) + "; expected one of: " + known);
}

bool written(const Recipe& r, const RecipeKnob& k) { return k.written == nullptr || k.written(r); }

}  // namespace

namespace {

const RecipePreset& find_preset(const std::string& name, const std::string& what) {
  std::string known;
  for (const RecipePreset& p : recipe_presets()) {
    if (name == p.name) return p;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  bad(what, "unknown preset '" + name + "'; expected one of: " + known);
}

}  // namespace

// A preset names its accumulators itself.
static bool seen_preset(const std::vector<std::string>& seen) { return std::find(seen.begin(), seen.end(), "preset") != seen.end(); }

static Recipe parse_recipe_line(const std::string& line) {
  Recipe r;
  std::istringstream in(line);
  std::string tok;
  std::vector<std::string> seen;
  // A preset first, wherever it stands; the other keys then override it.
  for (std::istringstream scan(line); scan >> tok;) {
    if (tok.rfind("preset=", 0) != 0) continue;
    if (!seen.empty()) bad("recipe string: token '" + tok + "'", "key 'preset' given twice");
    seen.push_back("preset");
    const RecipePreset& p = find_preset(tok.substr(7), "recipe string: token '" + tok + "'");
    std::istringstream pin(p.line);
    for (std::string t; pin >> t;) set_key(r, t.substr(0, t.find('=')), t.substr(t.find('=') + 1), std::string("preset ") + p.name);
  }
  while (in >> tok) {
    if (tok.rfind("preset=", 0) == 0) continue;
    const auto eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) bad("recipe string: token '" + tok + "'", "expected key=value");
    const std::string key = tok.substr(0, eq);
    for (const auto& k : seen)
      if (k == key) bad("recipe string: token '" + tok + "'", "key '" + key + "' given twice");
    seen.push_back(key);
    set_key(r, key, tok.substr(eq + 1), "recipe string: token '" + tok + "'");
  }
  const auto given = [&](const char* k) { return std::find(seen.begin(), seen.end(), k) != seen.end() || seen_preset(seen); };
  default_accumulators(r, given("acc.qk"), given("acc.pv"));
  validate(r);
  return r;
}

std::string to_string(const Recipe& r) {
  std::string s;
  for (const RecipeKnob& k : recipe_knobs()) {
    if (!written(r, k)) continue;
    if (!s.empty()) s += ' ';
    s += k.name;
    s += '=';
    s += k.get(r);
  }
  return s;
}

nlohmann::json to_json(const Recipe& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const RecipeKnob& k : recipe_knobs())
    if (written(r, k)) j[k.name] = k.get(r);
  return j;
}

// The parsers' errors (theirs and the formats' below them) with long tokens shown short.
std::string operand_to_string(const OperandQuant& o) { return recipe_text::operand_to_string(o); }

OperandQuant operand_from_string(const std::string& s, const std::string& what) {
  try {
    return recipe_text::operand_from_string(s, what);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(brief_tokens(e.what()));
  }
}

Recipe recipe_from_string(const std::string& line) {
  try {
    return parse_recipe_line(line);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(brief_tokens(e.what()));
  }
}

Recipe recipe_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_string()) {
    try {
      return recipe_from_string(j.get<std::string>());
    } catch (const std::invalid_argument& e) {
      bad(where, e.what());
    }
  }
  if (!j.is_object()) bad(where, "expected a JSON object of recipe keys or a one-line recipe string");
  Recipe r;
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) bad(where + ": key 'preset'", "expected a preset name");
    const std::string name = j["preset"].get<std::string>();
    if (name.find_first_of(" \t\n\r=") != std::string::npos) {
      bad(where + ": key 'preset'", "'" + name + "': expected one preset's name; the other keys go beside it in the JSON object");
    }
    r = recipe_from_string("preset=" + j["preset"].get<std::string>());
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "preset") continue;
    const std::string what = where + ": key '" + key + "'";
    std::string text;
    if (value.is_string()) text = value.get<std::string>();
    else if (value.is_number()) text = recipe_text::num(value.get<double>());
    else if (value.is_boolean()) text = value.get<bool>() ? "1" : "0";
    else if (value.is_object() && (key == "q" || key == "k" || key == "p" || key == "v")) {
      // {"format": "int8", "granularity": "block", "block": 64, "static": 448, "scale_format": "fp16"}
      const auto str = [&](const char* k) {
        if (!value[k].is_string()) bad(what + "." + k, "expected a string, got " + value[k].dump().substr(0, 60));
        return value[k].get<std::string>();
      };
      const auto number = [&](const char* k) {
        if (!value[k].is_number()) bad(what + "." + k, "expected a number, got " + value[k].dump().substr(0, 60));
        return value[k].get<double>();
      };
      const auto flag = [&](const char* k) {
        if (!value.contains(k)) return false;
        if (!value[k].is_boolean()) bad(what + "." + k, "expected true or false, got " + value[k].dump().substr(0, 60));
        return value[k].get<bool>();
      };
      text = value.contains("format") ? str("format") : "";
      if (value.contains("static")) text += "/static:" + recipe_text::num(number("static"));
      // Sizes belong to the granularity that reads them: block and group take block; thread takes
      // block, period and width, all three; any other size is an error, never dropped.
      const std::string gran = value.contains("granularity") ? str("granularity") : "";
      const bool thread = gran == "thread", sized = thread || gran == "block" || gran == "group";
      for (const char* k2 : {"block", "period", "width"}) {
        const bool wanted = std::string(k2) == "block" ? sized : thread;
        if (value.contains(k2) && !wanted) {
          bad(what + "." + k2, "applies to granularity " + std::string(std::string(k2) == "block" ? "block, group or thread" : "thread") +
                                   (gran.empty() ? std::string(", and no granularity is given") : ", not '" + gran + "'"));
        }
        if (!value.contains(k2) && wanted) bad(what + "." + k2, "absent; granularity '" + gran + "' needs it" + (thread ? " (thread takes block, period and width)" : ""));
      }
      if (!gran.empty()) {
        text += "/" + gran;
        if (sized) text += ":" + parse_text_int(number("block"), what + ".block");
        if (thread) text += ":" + parse_text_int(number("period"), what + ".period") + ":" + parse_text_int(number("width"), what + ".width");
      }
      std::vector<std::string> keys = {"format", "static", "granularity", "block", "period", "width"};
      for (const OperandModifier& m : operand_modifiers()) {
        keys.emplace_back(m.json_key);
        if (!value.contains(m.json_key)) continue;
        const std::string head = std::string("/") + m.head + ":";
        if (m.json == OperandModifier::Json::flag) text += flag(m.json_key) ? head + m.arg : "";
        else if (m.json == OperandModifier::Json::number) text += head + recipe_text::num(number(m.json_key));
        else text += head + str(m.json_key);
      }
      for (const auto& [k2, v2] : value.items()) {
        (void)v2;
        if (std::find(keys.begin(), keys.end(), k2) == keys.end()) {
          std::string known;
          for (const std::string& k3 : keys) known += (known.empty() ? "" : ", ") + k3;
          bad(what, "unknown operand key '" + k2 + "'" + did_you_mean(k2, keys) + "; expected " + known);
        }
      }
    } else {
      bad(what, "expected a string, number or boolean");
    }
    set_key(r, key, text, what);
  }
  default_accumulators(r, j.contains("acc.qk") || j.contains("preset"), j.contains("acc.pv") || j.contains("preset"));
  try {
    validate(r);
  } catch (const std::invalid_argument& e) {
    bad(where, e.what());
  }
  return r;
}

}  // namespace qattn
