#include "kernels/recipe/recipe_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kernels/formats/registry.hpp"
#include "kernels/formats/spelling.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/recipe/knobs.hpp"

namespace qattn::recipe_text {

void bad(const std::string& what, const std::string& why) { throw std::invalid_argument(what + ": " + why); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

double parse_number(const std::string& s, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::out_of_range&) {
    bad(what, "'" + s + "' is outside the range of a double (about 2.2e-308 to 1.8e308 in magnitude); expected a number within it");
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) bad(what, "'" + s + "' is not a number");
  if (!std::isfinite(v)) bad(what, "'" + s + "' is not a finite number");
  return v;
}

int parse_int(const std::string& s, const std::string& what) {
  const double v = parse_number(s, what);
  if (v != std::floor(v)) bad(what, "'" + s + "' is not an integer");
  if (std::fabs(v) > 1e9) bad(what, "'" + s + "' is outside -1e9..1e9; expected an integer within it");
  return static_cast<int>(v);
}

std::string num(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string accumulator_to_string(const Accumulator& a) {
  switch (a.kind) {
    case Accumulator::Kind::exact: return "exact";
    case Accumulator::Kind::fp32: return "fp32";
    case Accumulator::Kind::fp16: return "fp16";
    case Accumulator::Kind::fp16fma: return "fp16fma";
    case Accumulator::Kind::mma:
      // A measured preset by its name (the first of the names that share a model), as a recipe names it.
      for (const NamedAccumulator& n : kNamedAccumulators)
        if (same_accumulator(a, n.model())) return n.name;
      return "mma(chunk=" + std::to_string(a.chunk) + ",align=" + std::to_string(a.align_bits) + ",chunk_bits=" +
             std::to_string(a.chunk_mantissa_bits) + ",chunk_round=" + enum_name(a.chunk_rounding, kRounding) +
             ",acc_bits=" + std::to_string(a.acc_mantissa_bits) + ",add_round=" + enum_name(a.add_rounding, kRounding) +
             ",flush=" + std::to_string(a.flush_every) + (a.fused ? ",fused=1" : "") +
             (a.factor_exponent_min != Accumulator::kTrueExponents ? ",factor_emin=" + std::to_string(a.factor_exponent_min) : "") + ")";
  }
  return "?";
}

Accumulator accumulator_from_string(const std::string& s, const std::string& what) {
  Accumulator a;
  for (const NamedAccumulator& n : kNamedAccumulators)
    if (s == n.name) return n.model();
  if (s == "exact") a.kind = Accumulator::Kind::exact;
  else if (s == "fp32") a.kind = Accumulator::Kind::fp32;
  else if (s == "fp16") a.kind = Accumulator::Kind::fp16;
  else if (s == "fp16fma") a.kind = Accumulator::Kind::fp16fma;
  else if (s.rfind("mma(", 0) == 0 && s.back() == ')') {
    a.kind = Accumulator::Kind::mma;
    for (const std::string& kv : split(s.substr(4, s.size() - 5), ',')) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) bad(what, "'" + kv + "' in mma(...) is not key=value");
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1), w = what + " mma " + k;
      if (k == "chunk") a.chunk = parse_int(v, w);
      else if (k == "align") a.align_bits = parse_int(v, w);
      else if (k == "chunk_bits") a.chunk_mantissa_bits = parse_int(v, w);
      else if (k == "chunk_round") a.chunk_rounding = parse_enum(v, w, kRounding);
      else if (k == "acc_bits") a.acc_mantissa_bits = parse_int(v, w);
      else if (k == "add_round") a.add_rounding = parse_enum(v, w, kRounding);
      else if (k == "flush") a.flush_every = parse_int(v, w);
      else if (k == "fused") a.fused = parse_enum(v, w, kBool);
      else if (k == "factor_emin") {
        a.factor_exponent_min = parse_int(v, w);
        // A format's smallest normal exponent (fp16 -14, bf16 -126); the "own exponents" default is not spelled.
        if (a.factor_exponent_min < -1022 || a.factor_exponent_min > 0) bad(w, "expected -1022..0, got " + v);
      }
      else bad(what, "unknown mma key '" + k + "'; expected chunk, align, chunk_bits, chunk_round, acc_bits, add_round, flush, fused, factor_emin");
    }
  } else {
    std::string named;
    for (const NamedAccumulator& n : kNamedAccumulators) named += ", " + std::string(n.name);
    bad(what, "'" + s + "': expected exact, fp32, fp16, fp16fma" + named +
                  " or mma(chunk=..,align=..,chunk_bits=..,chunk_round=even|zero,acc_bits=..,add_round=even|zero,flush=..,fused=0|1,"
                  "factor_emin=..)");
  }
  return a;
}

std::string operand_to_string(const OperandQuant& o) {
  std::string s = name_of(o.spec.format);
  if (o.unit_scale) return s;
  if (o.spec.rule == ScaleRule::static_multiplier) {
    s += "/static:" + num(o.spec.multiplier);
  } else {
    s += std::string("/") + name_of(o.spec.granularity);
    if (o.spec.granularity == Granularity::block || o.spec.granularity == Granularity::group) s += ":" + std::to_string(o.spec.block);
    if (o.spec.granularity == Granularity::thread) {
      s += ":" + std::to_string(o.spec.block) + ":" + std::to_string(o.spec.period) + ":" + std::to_string(o.spec.width);
    }
  }
  for (const OperandModifier& m : operand_modifiers()) {
    if (!m.present(o.spec)) continue;
    s += std::string("/") + m.head + ":" + (m.arg ? std::string(m.arg) : m.value(o.spec));
  }
  return s;
}

namespace {

// The modifier grammar, for the messages: /scale:FORMAT, /amax:mul|signed, ...
std::string modifier_grammar() {
  std::string g;
  std::string last;
  for (const OperandModifier& m : operand_modifiers()) {
    if (last == m.head) {
      g += std::string("|") + m.arg;
      continue;
    }
    g += std::string("][/") + m.head + ":" + (m.arg ? m.arg : m.json == OperandModifier::Json::number ? "N" : "FORMAT");
    last = m.head;
  }
  return g + "]";
}

// Sets the modifier /HEAD:ARG on o; false when no modifier has that head.
bool set_modifier(QuantSpec& spec, const std::string& head, const std::string& arg, const std::string& text, const std::string& what) {
  std::string flags;  // the fixed arguments a flag head takes, for the message
  for (const OperandModifier& m : operand_modifiers()) {
    if (head != m.head) continue;
    if (m.arg == nullptr) {
      m.set(spec, arg, what, text);
      return true;
    }
    if (arg == m.arg) {
      m.set(spec, arg, what, text);
      return true;
    }
    flags += std::string(flags.empty() ? "" : " or ") + "'" + m.arg + "' (" + m.meaning + ")";
  }
  if (flags.empty()) return false;
  bad(what, "'" + text + "': " + head + " takes " + flags);
}

}  // namespace

OperandQuant operand_from_string(const std::string& s, const std::string& what) {
  const std::vector<std::string> parts = split(s, '/');
  if (parts.empty() || parts[0].empty()) bad(what, "empty operand; expected FORMAT[/GRANULARITY[:N]][/static:S" + modifier_grammar());
  OperandQuant o;
  o.spec.format = parse_format(parts[0], what);
  o.unit_scale = parts.size() == 1;
  if (o.unit_scale && format_of(o.spec.format).kind == Kind::integer) {
    bad(what, "'" + s + "': an integer format needs a granularity or a static scale, e.g. " + parts[0] + "/token");
  }
  bool have_rule = false;
  std::set<std::string> given;  // a modifier given twice would silently take the last value
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const auto colon = p.find(':');
    const std::string head = p.substr(0, colon), arg = colon == std::string::npos ? "" : p.substr(colon + 1);
    if (!given.insert(head).second) bad(what, "'" + s + "': /" + head + " given twice; expected each modifier once");
    if (head == "static") {
      if (have_rule) bad(what, "'" + s + "': give one granularity or one static scale");
      o.spec.rule = ScaleRule::static_multiplier;
      o.spec.granularity = Granularity::tensor;
      o.spec.multiplier = parse_number(arg, what + " static");
      if (!(o.spec.multiplier > 0 && std::isfinite(o.spec.multiplier))) {
        bad(what, "'" + s + "': static:" + arg + "; expected a positive finite multiplier (x * S is what the format encodes)");
      }
      have_rule = true;
    } else if (set_modifier(o.spec, head, arg, s, what)) {
      continue;
    } else {
      if (have_rule) bad(what, "'" + s + "': give one granularity or one static scale");
      std::vector<std::string> words;  // the granularities, then the modifiers: what may follow a '/'
      for (int g = 0; g <= static_cast<int>(Granularity::thread); ++g) words.emplace_back(name_of(static_cast<Granularity>(g)));
      if (std::find(words.begin(), words.end(), head) == words.end()) {
        words.emplace_back("static");
        for (const OperandModifier& m : operand_modifiers())
          if (std::find(words.begin(), words.end(), m.head) == words.end()) words.emplace_back(m.head);
        std::string known;
        for (const std::string& w : words) known += (known.empty() ? "" : ", ") + w;
        bad(what, "'" + s + "': unknown granularity or modifier '" + head + "'" + did_you_mean(head, words) + "; expected one of: " + known);
      }
      o.spec.granularity = parse_granularity(head, what);
      if (o.spec.granularity == Granularity::block || o.spec.granularity == Granularity::group) {
        if (arg.empty()) bad(what, "'" + s + "': " + head + " needs a size, e.g. " + head + ":32");
        o.spec.block = parse_int(arg, what + " " + head);
      } else if (o.spec.granularity == Granularity::thread) {
        const std::vector<std::string> sizes = split(arg, ':');
        if (sizes.size() != 3) bad(what, "'" + s + "': thread needs TILE:PERIOD:WIDTH (tokens a tile, lane classes repeat every PERIOD tokens, WIDTH consecutive tokens a class), e.g. thread:16:8:1");
        o.spec.block = parse_int(sizes[0], what + " thread tile");
        o.spec.period = parse_int(sizes[1], what + " thread period");
        o.spec.width = parse_int(sizes[2], what + " thread width");
      } else if (!arg.empty()) {
        bad(what, "'" + s + "': " + head + " takes no size");
      }
      have_rule = true;
    }
  }
  if (!o.unit_scale && !have_rule) bad(what, "'" + s + "': a scale format or /div needs a granularity or a static scale");
  return o;
}

}  // namespace qattn::recipe_text
