#include "kernels/recipe/knobs.hpp"

#include <cmath>

#include "kernels/formats/registry.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/recipe/recipe_text.hpp"

namespace qattn {

using namespace recipe_text;

const char* name_of(GpuFamily f) {
  switch (f) {
    case GpuFamily::mma: return "mma";
    case GpuFamily::wgmma: return "wgmma";
    case GpuFamily::decode: return "decode";
    case GpuFamily::integer: return "integer";
    case GpuFamily::dot4: return "dot4";
  }
  return "?";
}

namespace {

constexpr FamilySet kMma = family_bit(GpuFamily::mma), kWgmma = family_bit(GpuFamily::wgmma), kDecode = family_bit(GpuFamily::decode),
                    kInteger = family_bit(GpuFamily::integer), kDot4 = family_bit(GpuFamily::dot4);
// Declared where a GPU run has proven the family against the emulator with the knob moved
// (tests/gpu/test_coverage.cpp's walk, on the H100: out in mma, wgmma, decode and dot4, order=reverse
// in dot4, every operand modifier in those four). The operand modifiers are declared by the families
// that take Q, K and V from the emulator's quantizer on the host; the device preparation kernels
// (flash_mma's and flash_dot4's prepared paths) refuse them in their own rule.
constexpr FamilySet kHostQuantized = kMma | kWgmma | kDecode | kDot4;

using Values = std::vector<std::string>;

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
constexpr std::pair<const char*, ExpForm> kExpForm[] = {{"lab", ExpForm::lab}, {"fa", ExpForm::fa}, {"aten", ExpForm::aten}};
constexpr std::pair<const char*, RowSum> kRowSum[] = {{"sequential", RowSum::sequential}, {"lanes", RowSum::lanes}, {"vec16", RowSum::vec16}};
constexpr std::pair<const char*, Norm> kNorm[] = {{"div", Norm::div}, {"rcp", Norm::rcp}, {"sfu", Norm::sfu}};
constexpr std::pair<const char*, Exp2Math> kExp2[] = {{"rn", Exp2Math::rn}, {"sfu", Exp2Math::sfu}};

bool is_qflash(const Recipe& r) { return r.softmax == SoftmaxKind::qflash_integer; }

// An operand's own fields (format, granularity and sizes, scale rule, multiplier); its modifiers
// are the modifier table's.
void reset_operand(OperandQuant& o) {
  const OperandQuant d{};
  o.unit_scale = d.unit_scale;
  o.spec.format = d.spec.format;
  o.spec.granularity = d.spec.granularity;
  o.spec.block = d.spec.block;
  o.spec.period = d.spec.period;
  o.spec.width = d.spec.width;
  o.spec.rule = d.spec.rule;
  o.spec.multiplier = d.spec.multiplier;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "/") + p;
  return s;
}

bool is_granularity(const std::string& part) {
  const std::string head = part.substr(0, part.find(':'));
  for (int g = 0; g <= static_cast<int>(Granularity::thread); ++g)
    if (head == name_of(static_cast<Granularity>(g))) return true;
  return false;
}

// The values Q's, K's or V's text can move to, one knob at a time: the element format (a float bare,
// i.e. plain rounding, or with the current scale rule; an integer keeps the rule or takes per-token
// scales), the granularity, and each modifier on or off.
Values operand_variants(const OperandQuant& o) {
  Values out;
  const std::vector<std::string> parts = split(operand_to_string(o), '/');
  // The formats fit tries (the fnuz variants and e2m1 are left out: no kernel fit has met uses them).
  for (const char* f : {"fp32", "bf16", "fp16", "e4m3", "e5m2", "int8", "int4"}) {
    if (format_of(parse_format(f)).kind != Kind::integer) out.emplace_back(f);
    std::vector<std::string> p = parts;
    p[0] = f;
    if (p.size() == 1) p.emplace_back("token");
    out.push_back(join(p));
  }
  if (parts.size() == 1) return out;
  std::size_t g = 0;
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (is_granularity(parts[i])) g = i;
  if (g > 0) {
    for (const char* gran : {"tensor", "kvhead", "head", "token", "channel", "block:16", "block:32", "block:64", "block:128", "group:32",
                            // a lane's rows of an m16 fragment (one or two per warp), its keys of a 64- or 128-key tile
                            "thread:16:8:1", "thread:32:8:1", "thread:64:8:2", "thread:128:8:2"}) {
      std::vector<std::string> p = parts;
      p[g] = gran;
      out.push_back(join(p));
    }
  }
  for (const OperandModifier& m : operand_modifiers()) {
    for (const char* form : m.fit) {
      if (form == nullptr) continue;
      const std::string mod = form, head = mod.substr(0, mod.find(':'));
      std::vector<std::string> p;
      bool had = false;
      for (const std::string& x : parts) {
        if (x.substr(0, x.find(':')) == head) had = true;
        else p.push_back(x);
      }
      if (!had) p.push_back(mod);
      out.push_back(join(p));
    }
  }
  return out;
}

Values p_variants(const Recipe&) { return {"fp32", "fp16", "bf16", "e4m3/static:448", "e4m3/static:256", "e4m3/static:447.8898", "int8/static:127"}; }

Values accumulator_values(const Recipe&) {
  Values v = {"exact", "fp32", "fp16", "fp16fma"};
  for (const NamedAccumulator& n : kNamedAccumulators) v.emplace_back(n.name);
  return v;
}

// A key whose values come from one enum table.
#define QATTN_ENUM(FIELD, TABLE)                                                                       \
  [](Recipe& r, const std::string& v, const std::string& w) { r.FIELD = parse_enum(v, w, TABLE); },   \
      [](const Recipe& r) { return enum_name(r.FIELD, TABLE); }
#define QATTN_RESET(FIELD) [](Recipe& r) { r.FIELD = Recipe{}.FIELD; }
#define QATTN_OPERAND(OP)                                                                                            \
  [](Recipe& r, const std::string& v, const std::string& w) { r.OP = operand_from_string(v, w); },                  \
      [](const Recipe& r) { return operand_to_string(r.OP); }, nullptr, [](Recipe& r) { reset_operand(r.OP); }
#define QATTN_QFLASH(NAME, FIELD, TABLE, OTHER, ORDER)                                                                   \
  RecipeKnob {                                                                                                          \
    NAME, QATTN_ENUM(qflash.FIELD, TABLE), &is_qflash, QATTN_RESET(qflash.FIELD),                                       \
        [](const Recipe& r) { return is_qflash(r) ? Values{"lab", OTHER} : Values{}; }, ORDER,                         \
        "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash " NAME "=" OTHER, kNoFamily       \
  }

#define QATTN_INT_QK(TAIL) "q=int8/token k=int8/token " TAIL

// Canonical order: how to_string and to_json write a recipe.
const RecipeKnob kKnobs[] = {
    {"q", QATTN_OPERAND(q), [](const Recipe& r) { return operand_variants(r.q); }, 1, QATTN_INT_QK(""), kEveryFamily},
    {"k", QATTN_OPERAND(k), [](const Recipe& r) { return operand_variants(r.k); }, 2, QATTN_INT_QK(""), kEveryFamily},
    {"p", QATTN_OPERAND(p), &p_variants, 4, "p=e4m3/static:448", kEveryFamily},
    {"v", QATTN_OPERAND(v), [](const Recipe& r) { return operand_variants(r.v); }, 3, "v=e4m3/channel", kEveryFamily},
    {"ksmooth", QATTN_ENUM(k_smoothing, kKSmooth), nullptr, QATTN_RESET(k_smoothing), [](const Recipe&) { return Values{"none", "global"}; }, 10,
     QATTN_INT_QK("ksmooth=global"), kMma | kDot4},
    {"ksmooth_block", [](Recipe& r, const std::string& v, const std::string& w) { r.k_smoothing_block = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.k_smoothing_block); }, nullptr, QATTN_RESET(k_smoothing_block), nullptr, 0,
     QATTN_INT_QK("ksmooth=block ksmooth_block=32"), kMma | kDot4},
    {"qsmooth", QATTN_ENUM(q_smoothing, kBool), nullptr, QATTN_RESET(q_smoothing), nullptr, 0, QATTN_INT_QK("qsmooth=1"), kDot4},
    {"vsmooth", QATTN_ENUM(v_smoothing, kBool), nullptr, QATTN_RESET(v_smoothing), nullptr, 0, "vsmooth=1", kDot4},
    {"rotation", QATTN_ENUM(rotation, kRotation), nullptr, QATTN_RESET(rotation), nullptr, 0, QATTN_INT_QK("rotation=hadamard"), kMma | kDot4},
    {"softmax", QATTN_ENUM(softmax, kSoftmax), nullptr, QATTN_RESET(softmax), nullptr, 0,
     "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash", kInteger},
    {"denominator", QATTN_ENUM(denominator, kDenominator), nullptr, QATTN_RESET(denominator),
     [](const Recipe&) { return Values{"quantized", "float"}; }, 14, "p=e4m3/static:448 denominator=float", kMma | kWgmma | kDecode | kDot4},
    {"acc.qk", [](Recipe& r, const std::string& v, const std::string& w) { r.qk_acc = accumulator_from_string(v, w); },
     [](const Recipe& r) { return accumulator_to_string(r.qk_acc); }, nullptr, QATTN_RESET(qk_acc), &accumulator_values, 20, "acc.qk=fp16",
     kEveryFamily},
    {"acc.pv", [](Recipe& r, const std::string& v, const std::string& w) { r.pv_acc = accumulator_from_string(v, w); },
     [](const Recipe& r) { return accumulator_to_string(r.pv_acc); }, nullptr, QATTN_RESET(pv_acc), &accumulator_values, 21, "acc.pv=fp16",
     kEveryFamily},
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
     },
     nullptr, QATTN_RESET(tiles),
     // 256x512: PyTorch's CPU flash kernel (512-key blocks; its query block, 32-256 by N, moves no row's numbers).
     [](const Recipe&) { return Values{"32x32", "64x64", "64x128", "128x32", "128x64", "128x128", "256x512", "fa3_sm90"}; }, 19, "tiles=64x128",
     kEveryFamily},
    {"split", [](Recipe& r, const std::string& v, const std::string& w) { r.split_k = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_k); }, nullptr, QATTN_RESET(split_k), nullptr, 0, "split=2", kDecode | kDot4},
    {"split.pad", [](Recipe& r, const std::string& v, const std::string& w) { r.split_pad = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_pad); }, [](const Recipe& r) { return r.split_pad != 0; }, QATTN_RESET(split_pad), nullptr,
     0, "tiles=64x1 split=2 split.pad=256", kNoFamily},
    {"split.min", [](Recipe& r, const std::string& v, const std::string& w) { r.split_min = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_min); }, [](const Recipe& r) { return r.split_min != 0; }, QATTN_RESET(split_min), nullptr,
     0, "tiles=64x1 split=2 split.pad=256 split.min=512", kNoFamily},
    {"tau", [](Recipe& r, const std::string& v, const std::string& w) { r.lazy_rescale_tau = parse_number(v, w); },
     [](const Recipe& r) { return num(r.lazy_rescale_tau); }, nullptr, QATTN_RESET(lazy_rescale_tau), nullptr, 0, "tau=2", kDot4},
    QATTN_QFLASH("qflash.consts", constants, kQfConsts, "kernel", 22),
    QATTN_QFLASH("qflash.exp", exp, kQfExp, "fixed16", 23),
    QATTN_QFLASH("qflash.requant", requant, kQfRequant, "round16", 24),
    QATTN_QFLASH("qflash.release", release, kQfRelease, "shift30", 25),
    QATTN_QFLASH("qflash.start", start, kQfStart, "kernel", 26),
    QATTN_QFLASH("qflash.tail", tail, kQfTail, "pad", 27),
    QATTN_QFLASH("qflash.div", division, kQfDiv, "trunc32", 28),
    {"ksmooth.format", [](Recipe& r, const std::string& v, const std::string& w) { r.k_smoothing_format = parse_format(v, w); },
     [](const Recipe& r) { return std::string(name_of(r.k_smoothing_format)); }, [](const Recipe& r) { return r.k_smoothing_format != FormatId::fp32; },
     QATTN_RESET(k_smoothing_format),
     [](const Recipe& r) { return r.k_smoothing != KSmoothing::none ? Values{"fp32", "fp16"} : Values{}; }, 11,
     QATTN_INT_QK("ksmooth=global ksmooth.format=fp16"), kNoFamily},
    {"qprescale", QATTN_ENUM(q_prescale, kBool), [](const Recipe& r) { return r.q_prescale; }, QATTN_RESET(q_prescale),
     [](const Recipe&) { return Values{"0", "1"}; }, 12, QATTN_INT_QK("qprescale=1"), kNoFamily},
    {"qkscale", QATTN_ENUM(qk_scale_sequential, kQkScale), [](const Recipe& r) { return r.qk_scale_sequential; }, QATTN_RESET(qk_scale_sequential),
     [](const Recipe&) { return Values{"joint", "sequential"}; }, 13, QATTN_INT_QK("qkscale=sequential"), kNoFamily},
    {"pad", QATTN_ENUM(pad_keys_zero, kPad), [](const Recipe& r) { return r.pad_keys_zero; }, QATTN_RESET(pad_keys_zero),
     [](const Recipe&) { return Values{"none", "zero"}; }, 15, "pad=zero", kNoFamily},
    {"kzero", QATTN_ENUM(k_zero_q_sum, kKZero), [](const Recipe& r) { return r.k_zero_q_sum; }, QATTN_RESET(k_zero_q_sum),
     [](const Recipe& r) {
       const bool int4_groups = !r.k.unit_scale && r.k.spec.format == FormatId::int4 && r.k.spec.granularity == Granularity::group &&
                                r.q.spec.granularity == Granularity::group;
       return int4_groups ? Values{"codes", "qsum"} : Values{};
     },
     16, "q=int8/group:32 k=int4/group:32/scale:fp16/amax:signed kzero=qsum", kNoFamily},
    {"order", QATTN_ENUM(reverse_key_tiles, kOrder), [](const Recipe& r) { return r.reverse_key_tiles; }, QATTN_RESET(reverse_key_tiles),
     [](const Recipe& r) { return r.split_k == 1 && r.softmax == SoftmaxKind::float_online ? Values{"forward", "reverse"} : Values{}; }, 17,
     "order=reverse", kDot4},
    {"out", [](Recipe& r, const std::string& v, const std::string& w) { r.out = parse_format(v, w); },
     [](const Recipe& r) { return std::string(name_of(r.out)); }, [](const Recipe& r) { return r.out != FormatId::fp32; }, QATTN_RESET(out),
     [](const Recipe&) { return Values{"fp32", "fp16", "bf16"}; }, 18, "out=bf16", kHostQuantized},
    // The float softmax's vendor math (recipe.hpp): written only when moved, so earlier recipes print as before.
    {"expform", QATTN_ENUM(exp_form, kExpForm), [](const Recipe& r) { return r.exp_form != ExpForm::lab; }, QATTN_RESET(exp_form),
     [](const Recipe& r) {
       if (r.softmax != SoftmaxKind::float_online || r.lazy_rescale_tau != 0) return Values{};
       return r.split_k == 1 && !r.q_prescale ? Values{"lab", "fa", "aten"} : Values{"lab", "fa"};
     }, 19,
     "expform=fa", kNoFamily},
    {"rowsum", QATTN_ENUM(row_sum, kRowSum), [](const Recipe& r) { return r.row_sum != RowSum::sequential; }, QATTN_RESET(row_sum),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"sequential", "lanes", "vec16"} : Values{}; }, 20, "rowsum=lanes",
     kNoFamily},
    {"norm", QATTN_ENUM(norm, kNorm), [](const Recipe& r) { return r.norm != Norm::div; }, QATTN_RESET(norm),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"div", "rcp", "sfu"} : Values{}; }, 21, "norm=rcp", kNoFamily},
    {"exp2", QATTN_ENUM(exp2, kExp2), [](const Recipe& r) { return r.exp2 != Exp2Math::rn; }, QATTN_RESET(exp2),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"rn", "sfu"} : Values{}; }, 22, "exp2=sfu", kNoFamily},
};
#undef QATTN_ENUM
#undef QATTN_RESET
#undef QATTN_OPERAND
#undef QATTN_QFLASH
#undef QATTN_INT_QK

using Json = OperandModifier::Json;

// Canonical order: how an operand prints them.
const OperandModifier kModifiers[] = {
    {"scale", nullptr, "scale_format", Json::text, "the scale stored in this format",
     [](const QuantSpec& s) { return s.scale_format != FormatId::fp32; }, [](const QuantSpec& s) { return std::string(name_of(s.scale_format)); },
     [](QuantSpec& s, const std::string& a, const std::string& w, const std::string&) { s.scale_format = parse_format(a, w + " scale"); },
     [](QuantSpec& s) { s.scale_format = QuantSpec{}.scale_format; }, {"scale:fp16", nullptr}, "q=int8/token/scale:fp16 k=int8/token", kEveryFamily},
    {"div", nullptr, "divide", Json::text, "codes by a division, the quotient rounded to this format",
     [](const QuantSpec& s) { return s.divide; }, [](const QuantSpec& s) { return std::string(name_of(s.quotient_format)); },
     [](QuantSpec& s, const std::string& a, const std::string& w, const std::string&) {
       s.divide = true;
       s.quotient_format = a.empty() ? FormatId::fp32 : parse_format(a, w + " div");
     },
     [](QuantSpec& s) { s.divide = false, s.quotient_format = QuantSpec{}.quotient_format; }, {"div:fp16", "div:fp32"}, "q=int8/token/div:fp16 k=int8/token", kHostQuantized},
    {"amax", "mul", "amax_mul", Json::flag, "the scale as absmax x fp32(1/max)", [](const QuantSpec& s) { return s.amax_mul; }, nullptr,
     [](QuantSpec& s, const std::string&, const std::string&, const std::string&) { s.amax_mul = true; }, [](QuantSpec& s) { s.amax_mul = false; }, {"amax:mul", nullptr},
     "q=int8/token/amax:mul k=int8/token", kHostQuantized},
    {"amax", "signed", "amax_signed", Json::flag, "q4_0's grid: the element of largest magnitude at -(max + 1)",
     [](const QuantSpec& s) { return s.signed_max; }, nullptr, [](QuantSpec& s, const std::string&, const std::string&, const std::string&) { s.signed_max = true; },
     [](QuantSpec& s) { s.signed_max = false; }, {nullptr, nullptr}, "v=int4/group:32/amax:signed", kHostQuantized},
    {"codes", "fp32", "codes_fp32", Json::flag, "codes from the fp32 scale, before it is rounded to the stored scale format",
     [](const QuantSpec& s) { return s.codes_fp32; }, nullptr, [](QuantSpec& s, const std::string&, const std::string&, const std::string&) { s.codes_fp32 = true; },
     [](QuantSpec& s) { s.codes_fp32 = false; }, {nullptr, nullptr}, "v=int8/group:32/scale:fp16/codes:fp32", kHostQuantized},
    {"max", nullptr, "max", Json::number, "the value the absmax maps to", [](const QuantSpec& s) { return s.scale_max != 0; },
     [](const QuantSpec& s) { return num(s.scale_max); },
     [](QuantSpec& s, const std::string& a, const std::string& w, const std::string& t) {
       s.scale_max = parse_number(a, w + " max");
       if (!(s.scale_max > 0 && std::isfinite(s.scale_max))) bad(w, "'" + t + "': max:" + a + "; expected the positive value the absmax maps to");
     },
     [](QuantSpec& s) { s.scale_max = 0; }, {nullptr, nullptr}, "v=e4m3/channel/max:2.25", kHostQuantized},
    {"round", "away", "round_away", Json::flag, "ties away from zero by an fp32 add of 0.5, then truncation",
     [](const QuantSpec& s) { return s.half_away; }, nullptr, [](QuantSpec& s, const std::string&, const std::string&, const std::string&) { s.half_away = true; },
     [](QuantSpec& s) { s.half_away = false; }, {"round:away", nullptr}, "q=int8/token/round:away k=int8/token", kHostQuantized},
    {"eps", nullptr, "eps", Json::number, "a number added to each scale", [](const QuantSpec& s) { return s.scale_eps != 0; },
     [](const QuantSpec& s) { return num(s.scale_eps); },
     [](QuantSpec& s, const std::string& a, const std::string& w, const std::string& t) {
       s.scale_eps = parse_number(a, w + " eps");
       if (!(s.scale_eps > 0 && s.scale_eps < 1)) bad(w, "'" + t + "': eps:" + a + "; expected a number in (0, 1) added to each scale");
     },
     [](QuantSpec& s) { s.scale_eps = 0; }, {"eps:1e-07", nullptr}, "q=int8/token/eps:1e-07 k=int8/token", kHostQuantized},
};

}  // namespace

std::span<const RecipeKnob> recipe_knobs() { return kKnobs; }
std::span<const OperandModifier> operand_modifiers() { return kModifiers; }

const RecipeKnob* find_knob(std::string_view name) {
  for (const RecipeKnob& k : kKnobs)
    if (name == k.name) return &k;
  return nullptr;
}

bool knob_differs(const RecipeKnob& k, const Recipe& r) {
  Recipe d = r;
  k.reset(d);
  return !(d == r);
}

std::string undeclared_knob(const Recipe& r, GpuFamily family) {
  const FamilySet bit = family_bit(family);
  Recipe rest = r;  // r with every field a row owns reset: what no row owns is left
  for (const RecipeKnob& k : kKnobs) {
    if (!(k.gpu & bit) && knob_differs(k, r)) return std::string(k.name) + "=" + k.get(r);
    k.reset(rest);
  }
  for (const auto& [o, name] : {std::pair{&r.q, "q"}, std::pair{&r.k, "k"}, std::pair{&r.p, "p"}, std::pair{&r.v, "v"}}) {
    for (const OperandModifier& m : kModifiers) {
      if (!(m.gpu & bit) && m.present(o->spec)) return std::string(name) + ": /" + m.head + ":" + (m.arg ? std::string(m.arg) : m.value(o->spec));
    }
  }
  for (OperandQuant* o : {&rest.q, &rest.k, &rest.p, &rest.v})
    for (const OperandModifier& m : kModifiers) m.reset(o->spec);
  if (!(rest == Recipe{})) return "a recipe field that no row of the knob table (kernels/recipe/knobs.cpp) owns differs from its default";
  return "";
}

}  // namespace qattn
