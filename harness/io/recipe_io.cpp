#include "harness/io/recipe_io.hpp"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "harness/io/text.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/formats/registry.hpp"

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

// A JSON number that must be a whole count, as text for the one-line form.
std::string parse_text_int(double v, const std::string& what) {
  if (v != std::floor(v) || std::fabs(v) > 1e9) bad(what, "expected an integer, got " + std::to_string(v));
  return std::to_string(static_cast<long long>(v));
}

// The shortest text that reads back as the same double (no locale, no iostreams).
std::string num(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

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

constexpr std::pair<const char*, KSmoothing> kKSmooth[] = {{"none", KSmoothing::none},
                                                           {"global", KSmoothing::global_mean},
                                                           {"block", KSmoothing::block_mean},
                                                           {"block_corrected", KSmoothing::block_mean_corrected},
                                                           {"running", KSmoothing::running_mean}};
constexpr std::pair<const char*, Rotation> kRotation[] = {{"none", Rotation::none}, {"hadamard", Rotation::hadamard}};
constexpr std::pair<const char*, SoftmaxKind> kSoftmax[] = {{"float", SoftmaxKind::float_online},
                                                            {"qflash", SoftmaxKind::qflash_integer},
                                                            {"shiftmax", SoftmaxKind::ivit_shiftmax}};
constexpr std::pair<const char*, Denominator> kDenominator[] = {{"quantized", Denominator::quantized_p}, {"float", Denominator::float_p}};
constexpr std::pair<const char*, Rounding> kRounding[] = {{"even", Rounding::nearest_even}, {"zero", Rounding::toward_zero}};
constexpr std::pair<const char*, QFlashVariant::Constants> kQfConsts[] = {{"lab", QFlashVariant::Constants::lab}, {"kernel", QFlashVariant::Constants::kernel}};
constexpr std::pair<const char*, QFlashVariant::Exp> kQfExp[] = {{"lab", QFlashVariant::Exp::lab}, {"fixed16", QFlashVariant::Exp::fixed16}};
constexpr std::pair<const char*, QFlashVariant::Requant> kQfRequant[] = {{"lab", QFlashVariant::Requant::lab}, {"round16", QFlashVariant::Requant::round16}};
constexpr std::pair<const char*, QFlashVariant::Release> kQfRelease[] = {{"lab", QFlashVariant::Release::lab}, {"shift30", QFlashVariant::Release::shift30}};
constexpr std::pair<const char*, QFlashVariant::Start> kQfStart[] = {{"lab", QFlashVariant::Start::lab}, {"kernel", QFlashVariant::Start::kernel}};
constexpr std::pair<const char*, QFlashVariant::Tail> kQfTail[] = {{"lab", QFlashVariant::Tail::lab}, {"pad", QFlashVariant::Tail::pad}};
constexpr std::pair<const char*, QFlashVariant::Division> kQfDiv[] = {{"lab", QFlashVariant::Division::lab}, {"trunc32", QFlashVariant::Division::trunc32}};
constexpr std::pair<const char*, bool> kQkScale[] = {{"joint", false}, {"sequential", true}};
constexpr std::pair<const char*, bool> kPad[] = {{"none", false}, {"zero", true}};
constexpr std::pair<const char*, bool> kKZero[] = {{"codes", false}, {"qsum", true}};
constexpr std::pair<const char*, bool> kOrder[] = {{"forward", false}, {"reverse", true}};
constexpr std::pair<const char*, bool> kBool[] = {{"0", false}, {"1", true}, {"false", false}, {"true", true}};

std::string acc_to_string(const Accumulator& a) {
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

Accumulator acc_from_string(const std::string& s, const std::string& what) {
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

// Every key of both forms, declared once, in canonical order: its name, how its text sets the
// recipe, how the recipe prints it, and whether the canonical forms write it (the qflash.* keys only
// with softmax=qflash, the kernel-specific keys only away from their defaults, so recipes without
// them read as they always did).
struct Key {
  const char* name;
  void (*set)(Recipe& r, const std::string& value, const std::string& what);
  std::string (*get)(const Recipe& r);
  bool (*applies)(const Recipe& r) = nullptr;  // nullptr: always written
};

bool is_qflash(const Recipe& r) { return r.softmax == SoftmaxKind::qflash_integer; }

// An enum key whose value names come from one table.
#define QATTN_ENUM_KEY(NAME, FIELD, TABLE, APPLIES)                                                                              \
  Key {                                                                                                                          \
    NAME, [](Recipe& r, const std::string& v, const std::string& w) { r.FIELD = parse_enum(v, w, TABLE); },                    \
        [](const Recipe& r) { return enum_name(r.FIELD, TABLE); }, APPLIES                                                      \
  }

const Key kKeys[] = {
    {"q", [](Recipe& r, const std::string& v, const std::string& w) { r.q = operand_from_string(v, w); }, [](const Recipe& r) { return operand_to_string(r.q); }},
    {"k", [](Recipe& r, const std::string& v, const std::string& w) { r.k = operand_from_string(v, w); }, [](const Recipe& r) { return operand_to_string(r.k); }},
    {"p", [](Recipe& r, const std::string& v, const std::string& w) { r.p = operand_from_string(v, w); }, [](const Recipe& r) { return operand_to_string(r.p); }},
    {"v", [](Recipe& r, const std::string& v, const std::string& w) { r.v = operand_from_string(v, w); }, [](const Recipe& r) { return operand_to_string(r.v); }},
    QATTN_ENUM_KEY("ksmooth", k_smoothing, kKSmooth, nullptr),
    {"ksmooth_block", [](Recipe& r, const std::string& v, const std::string& w) { r.k_smoothing_block = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.k_smoothing_block); }},
    QATTN_ENUM_KEY("qsmooth", q_smoothing, kBool, nullptr),
    QATTN_ENUM_KEY("vsmooth", v_smoothing, kBool, nullptr),
    QATTN_ENUM_KEY("rotation", rotation, kRotation, nullptr),
    QATTN_ENUM_KEY("softmax", softmax, kSoftmax, nullptr),
    QATTN_ENUM_KEY("denominator", denominator, kDenominator, nullptr),
    {"acc.qk", [](Recipe& r, const std::string& v, const std::string& w) { r.qk_acc = acc_from_string(v, w); }, [](const Recipe& r) { return acc_to_string(r.qk_acc); }},
    {"acc.pv", [](Recipe& r, const std::string& v, const std::string& w) { r.pv_acc = acc_from_string(v, w); }, [](const Recipe& r) { return acc_to_string(r.pv_acc); }},
    {"tiles",
     [](Recipe& r, const std::string& v, const std::string& w) {
       r.tiles = Tiles{};
       if (v == "fa3_sm90") {
         r.tiles.fa3_sm90 = true;
         return;
       }
       const auto x = v.find('x');
       if (x == std::string::npos) bad(w, "'" + v + "': expected BRxBC, e.g. 64x64, or fa3_sm90 (FlashAttention-3's choice by head dim and mask)");
       r.tiles.block_q = parse_int(v.substr(0, x), w);
       r.tiles.block_k = parse_int(v.substr(x + 1), w);
     },
     [](const Recipe& r) {
       return r.tiles.fa3_sm90 ? std::string("fa3_sm90") : std::to_string(r.tiles.block_q) + "x" + std::to_string(r.tiles.block_k);
     }},
    {"split", [](Recipe& r, const std::string& v, const std::string& w) { r.split_k = parse_int(v, w); }, [](const Recipe& r) { return std::to_string(r.split_k); }},
    {"split.pad", [](Recipe& r, const std::string& v, const std::string& w) { r.split_pad = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_pad); }, [](const Recipe& r) { return r.split_pad != 0; }},
    {"split.min", [](Recipe& r, const std::string& v, const std::string& w) { r.split_min = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_min); }, [](const Recipe& r) { return r.split_min != 0; }},
    {"tau", [](Recipe& r, const std::string& v, const std::string& w) { r.lazy_rescale_tau = parse_number(v, w); }, [](const Recipe& r) { return num(r.lazy_rescale_tau); }},
    QATTN_ENUM_KEY("qflash.consts", qflash.constants, kQfConsts, &is_qflash),
    QATTN_ENUM_KEY("qflash.exp", qflash.exp, kQfExp, &is_qflash),
    QATTN_ENUM_KEY("qflash.requant", qflash.requant, kQfRequant, &is_qflash),
    QATTN_ENUM_KEY("qflash.release", qflash.release, kQfRelease, &is_qflash),
    QATTN_ENUM_KEY("qflash.start", qflash.start, kQfStart, &is_qflash),
    QATTN_ENUM_KEY("qflash.tail", qflash.tail, kQfTail, &is_qflash),
    QATTN_ENUM_KEY("qflash.div", qflash.division, kQfDiv, &is_qflash),
    {"ksmooth.format", [](Recipe& r, const std::string& v, const std::string& w) { r.k_smoothing_format = parse_format(v, w); },
     [](const Recipe& r) { return std::string(name_of(r.k_smoothing_format)); }, [](const Recipe& r) { return r.k_smoothing_format != FormatId::fp32; }},
    QATTN_ENUM_KEY("qprescale", q_prescale, kBool, [](const Recipe& r) { return r.q_prescale; }),
    QATTN_ENUM_KEY("qkscale", qk_scale_sequential, kQkScale, [](const Recipe& r) { return r.qk_scale_sequential; }),
    QATTN_ENUM_KEY("pad", pad_keys_zero, kPad, [](const Recipe& r) { return r.pad_keys_zero; }),
    QATTN_ENUM_KEY("kzero", k_zero_q_sum, kKZero, [](const Recipe& r) { return r.k_zero_q_sum; }),
    QATTN_ENUM_KEY("order", reverse_key_tiles, kOrder, [](const Recipe& r) { return r.reverse_key_tiles; }),
    {"out", [](Recipe& r, const std::string& v, const std::string& w) { r.out = parse_format(v, w); },
     [](const Recipe& r) { return std::string(name_of(r.out)); }, [](const Recipe& r) { return r.out != FormatId::fp32; }},
};
#undef QATTN_ENUM_KEY

bool key_applies(const Recipe& r, const Key& k) { return k.applies == nullptr || k.applies(r); }

void set_key(Recipe& r, const std::string& key, const std::string& value, const std::string& what) {
  std::string known;
  std::vector<std::string> names;
  for (const Key& k : kKeys) {
    if (key == k.name) return k.set(r, value, what);
    known += (known.empty() ? "" : ", ") + std::string(k.name);
    names.emplace_back(k.name);
  }
  bad(what, "unknown key '" + key + "'" + did_you_mean(key, names) + "; expected one of: " + known);
}

}  // namespace

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
  if (o.spec.scale_format != FormatId::fp32) s += std::string("/scale:") + name_of(o.spec.scale_format);
  if (o.spec.divide) s += std::string("/div:") + name_of(o.spec.quotient_format);
  if (o.spec.amax_mul) s += "/amax:mul";
  if (o.spec.signed_max) s += "/amax:signed";
  if (o.spec.codes_fp32) s += "/codes:fp32";
  if (o.spec.scale_max != 0) s += "/max:" + num(o.spec.scale_max);
  if (o.spec.half_away) s += "/round:away";
  if (o.spec.scale_eps != 0) s += "/eps:" + num(o.spec.scale_eps);
  return s;
}

static OperandQuant parse_operand(const std::string& s, const std::string& what) {
  const std::vector<std::string> parts = split(s, '/');
  if (parts.empty() || parts[0].empty()) bad(what, "empty operand; expected FORMAT[/GRANULARITY[:N]][/static:S][/scale:FORMAT][/div[:FORMAT]][/amax:mul|signed][/round:away][/eps:E][/codes:fp32][/max:M]");
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
    } else if (head == "scale") {
      o.spec.scale_format = parse_format(arg, what + " scale");
    } else if (head == "amax") {
      if (arg != "mul" && arg != "signed") {
        bad(what, "'" + s + "': amax takes 'mul' (the scale as absmax x fp32(1/max)) or 'signed' (q4_0's grid: the element of largest magnitude at -(max + 1))");
      }
      (arg == "mul" ? o.spec.amax_mul : o.spec.signed_max) = true;
    } else if (head == "max") {
      o.spec.scale_max = parse_number(arg, what + " max");
      if (!(o.spec.scale_max > 0 && std::isfinite(o.spec.scale_max))) bad(what, "'" + s + "': max:" + arg + "; expected the positive value the absmax maps to");
    } else if (head == "codes") {
      if (arg != "fp32") bad(what, "'" + s + "': codes takes 'fp32' (codes from the fp32 scale, before it is rounded to the stored scale format)");
      o.spec.codes_fp32 = true;
    } else if (head == "round") {
      if (arg != "away") bad(what, "'" + s + "': round takes 'away' (ties away from zero by an fp32 add of 0.5, then truncation)");
      o.spec.half_away = true;
    } else if (head == "eps") {
      o.spec.scale_eps = parse_number(arg, what + " eps");
      if (!(o.spec.scale_eps > 0 && o.spec.scale_eps < 1)) bad(what, "'" + s + "': eps:" + arg + "; expected a number in (0, 1) added to each scale");
    } else if (head == "div") {
      o.spec.divide = true;
      o.spec.quotient_format = arg.empty() ? FormatId::fp32 : parse_format(arg, what + " div");
    } else {
      if (have_rule) bad(what, "'" + s + "': give one granularity or one static scale");
      std::vector<std::string> words;  // the granularities, then the modifiers: what may follow a '/'
      for (int g = 0; g <= static_cast<int>(Granularity::thread); ++g) words.emplace_back(name_of(static_cast<Granularity>(g)));
      if (std::find(words.begin(), words.end(), head) == words.end()) {
        for (const char* m : {"static", "scale", "div", "amax", "round", "eps", "codes", "max"}) words.emplace_back(m);
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
  for (const Key& k : kKeys) {
    if (!key_applies(r, k)) continue;
    if (!s.empty()) s += ' ';
    s += k.name;
    s += '=';
    s += k.get(r);
  }
  return s;
}

nlohmann::json to_json(const Recipe& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const Key& k : kKeys)
    if (key_applies(r, k)) j[k.name] = k.get(r);
  return j;
}

// The parsers' errors (theirs and the formats' below them) with long tokens shown short.
OperandQuant operand_from_string(const std::string& s, const std::string& what) {
  try {
    return parse_operand(s, what);
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
    else if (value.is_number()) text = num(value.get<double>());
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
      if (value.contains("static")) text += "/static:" + num(number("static"));
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
      if (value.contains("scale_format")) text += "/scale:" + str("scale_format");
      if (value.contains("divide")) text += "/div:" + str("divide");
      if (flag("amax_mul")) text += "/amax:mul";
      if (flag("round_away")) text += "/round:away";
      if (value.contains("eps")) text += "/eps:" + num(number("eps"));
      if (flag("amax_signed")) text += "/amax:signed";
      if (flag("codes_fp32")) text += "/codes:fp32";
      if (value.contains("max")) text += "/max:" + num(number("max"));
      for (const auto& [k2, v2] : value.items()) {
        (void)v2;
        if (k2 != "format" && k2 != "static" && k2 != "granularity" && k2 != "block" && k2 != "period" && k2 != "width" && k2 != "scale_format" && k2 != "divide" &&
            k2 != "amax_mul" && k2 != "round_away" && k2 != "eps" &&
            k2 != "amax_signed" && k2 != "codes_fp32" && k2 != "max") {
          bad(what, "unknown operand key '" + k2 + "'; expected format, granularity, block, period, width, static, scale_format, divide, amax_mul, round_away, eps, amax_signed, codes_fp32, max");
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
