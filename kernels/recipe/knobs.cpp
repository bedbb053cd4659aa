#include "kernels/recipe/knobs.hpp"

#include <cmath>
#include <stdexcept>

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
// in dot4, every operand modifier in those four; ksmooth.format and the softmax's vendor math,
// expform, rowsum, norm and exp2, in dot4). The operand modifiers are declared by the families
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
        "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash " NAME "=" OTHER, kNoFamily,      \
        [](const Recipe& r) {                                                                                           \
          if (r.qflash.FIELD != QFlashVariant{}.FIELD && !is_qflash(r))                                                 \
            bad_field("qflash", "the qflash.* keys choose QFlash's integer constants and steps: they need softmax=qflash"); \
        }                                                                                                               \
  }

#define QATTN_INT_QK(TAIL) "q=int8/token k=int8/token " TAIL

// ---- validity rules (a row's `check`; validate() runs them in the table's order) ----

[[noreturn]] void bad_field(const std::string& field, const std::string& why) {
  throw std::invalid_argument("recipe field '" + field + "': " + why);
}

void check_operand(const OperandQuant& o, const char* name) {
  const std::string n = name;
  const Format f = format_of(o.spec.format);
  if (o.spec.format == FormatId::e8m0) bad_field(n + ".format", "e8m0 is a scale format, not an element format");
  if (o.unit_scale) {
    if (f.kind == Kind::integer) bad_field(n + ".scale", std::string("an integer format (") + name_of(o.spec.format) + ") needs a scale rule, not unit scale");
    return;
  }
  if (const auto p = spec_problem(o.spec)) bad_field(n + "." + p->field, p->why);
}

// Q's row holds Q K^T's joint rules: one integer dot needs both operands integer, a scale factored out
// of it, the same groups on both, and an exact (int32) sum.
void check_q(const Recipe& r) {
  check_operand(r.q, "q");
  const bool qi = format_of(r.q.spec.format).kind == Kind::integer, ki = format_of(r.k.spec.format).kind == Kind::integer;
  if (qi != ki) bad_field("q.format/k.format", "QK^T needs both operands integer or both float");
  if (!qi) return;
  for (const auto* o : {&r.q, &r.k}) {
    if (o->spec.granularity == Granularity::channel) {
      bad_field(o == &r.q ? "q.granularity" : "k.granularity",
                "a per-channel scale varies along the head dim, so an integer QK^T cannot factor it out; use tensor, head, token, block or group");
    }
  }
  if (r.q.spec.granularity == Granularity::group || r.k.spec.granularity == Granularity::group) {
    if (r.q.spec.granularity != r.k.spec.granularity || r.q.spec.block != r.k.spec.block) {
      bad_field("q.granularity/k.granularity", "group scales on an integer QK^T need the same group on Q and K (one int dot per group)");
    }
  }
  if (r.qk_acc.kind != Accumulator::Kind::exact) bad_field("acc.qk", "integer QK^T accumulates in int32, exactly: use 'exact' (the default for integer Q and K)");
}

void check_k(const Recipe& r) { check_operand(r.k, "k"); }

void check_v(const Recipe& r) { check_operand(r.v, "v"); }

// P is formed in the softmax as fp(P x multiplier): its format and static multiplier are all it takes.
void check_p(const Recipe& r) {
  const OperandQuant& p = r.p;
  if (!p.unit_scale) {
    if (p.spec.rule != ScaleRule::static_multiplier) {
      bad_field("p.scale", "P is quantized with a static multiplier (P <= 1 after the running max: 127, 448, 240)");
    }
    const QuantSpec& s = p.spec;
    if (s.scale_format != FormatId::fp32 || s.divide || s.amax_mul || s.half_away || s.scale_eps != 0 || s.codes_fp32 || s.signed_max ||
        s.scale_max != 0) {
      bad_field("p", "P takes a format and a static multiplier only (e.g. p=e4m3/static:448); /scale, /div, /amax, /round, /eps, /codes and /max "
                     "apply to Q, K and V");
    }
  }
  check_operand(p, "p");
}

void check_acc(const Accumulator& a, const char* name) {
  const std::string n = name;
  if (a.chunk <= 0) bad_field(n + ".chunk", "must be positive (16 or 32 on real MMA units)");
  if (a.align_bits < 2 || a.align_bits > 60) bad_field(n + ".align_bits", "expected 2..60");
  // A fused chunk sums up to 257 aligned values below 2^(align_bits + 1) each: exact in a double
  // while align_bits + 10 <= 53; 40 leaves room.
  if (a.fused && a.align_bits > 40) bad_field(n + ".align_bits", "expected 2..40 for a fused accumulator");
  if (a.fused && a.chunk > 256) bad_field(n + ".chunk", "expected <= 256 for a fused accumulator");
  if (a.chunk_mantissa_bits < 1 || a.chunk_mantissa_bits > 52) bad_field(n + ".chunk_mantissa_bits", "expected 1..52");
  if (a.acc_mantissa_bits < 1 || a.acc_mantissa_bits > 23) bad_field(n + ".acc_mantissa_bits", "expected 1..23 (an fp32 register holds at most 23)");
  if (a.flush_every < 0) bad_field(n + ".flush_every", "must be >= 0 (0 = single level)");
  if (a.factor_exponent_min != Accumulator::kTrueExponents) {
    if (!a.fused) bad_field(n + ".factor_exponent_min", "applies to fused accumulators only (fused=1)");
    // A format's smallest normal exponent: fp16 -14, bf16 and fp32 -126, e4m3 -6.
    if (a.factor_exponent_min < -1022 || a.factor_exponent_min > 0) bad_field(n + ".factor_exponent_min", "expected -1022..0");
  }
}

// Upper bounds: the emulator keeps a split's partial output per row of a query tile, so memory grows
// as tile rows x splits x d. 4096 is past any kernel's tile (<= 256) or key split (decode kernels use
// <= 256) and keeps a mistyped value (split=1000000000) an error, not an allocation.
void check_tiles(const Recipe& r) {
  if (r.tiles.block_q <= 0 || r.tiles.block_k <= 0 || r.tiles.block_q > 4096 || r.tiles.block_k > 4096) {
    bad_field("tiles", "block sizes must be 1..4096");
  }
}

void check_split(const Recipe& r) {
  if (r.split_k < 1 || r.split_k > 4096) bad_field("split", "expected 1..4096");
}

void check_split_pad(const Recipe& r) {
  if (r.split_pad < 0 || r.split_pad > 65536) bad_field("split.pad", "expected 0..65536 cells (0: split the visible key tiles)");
  if (r.split_pad > 0 && r.tiles.block_k != 1) {
    bad_field("split.pad", "splits by cache cell are modelled one key a tile (tiles=Nx1): a tile of several keys could straddle two chunks");
  }
}

void check_split_min(const Recipe& r) {
  if (r.split_min < 0 || r.split_min > (1 << 30)) bad_field("split.min", "expected 0..2^30 cells");
  if (r.split_min > 0 && r.split_pad == 0) bad_field("split.min", "a minimum cell count for splitting needs split.pad (splits by cache cell)");
}

void check_tau(const Recipe& r) {
  if (!(r.lazy_rescale_tau >= 0) || !std::isfinite(r.lazy_rescale_tau)) bad_field("tau", "must be >= 0 (0 = always rescale)");
}

void check_ksmooth_block(const Recipe& r) {
  if (r.k_smoothing_block < 0) bad_field("ksmooth_block", "must be >= 0 (0 = the K tile)");
}

// QFlash compares integer scores across tiles directly: one scale per head (or tensor) for Q, K and
// V, int8 everywhere, P requantized to int8 (static 127), integer accumulators.
void check_softmax(const Recipe& r) {
  if (r.softmax == SoftmaxKind::float_online) return;
  for (const auto& [o, name] : {std::pair{&r.q, "q"}, std::pair{&r.k, "k"}, std::pair{&r.v, "v"}}) {
    const bool shared = o->spec.granularity == Granularity::tensor || o->spec.granularity == Granularity::head;
    if (o->unit_scale || o->spec.format != FormatId::int8 || !shared || o->spec.rule != ScaleRule::dynamic_absmax || o->spec.signed_max) {
      bad_field(std::string(name), "an integer softmax (qflash, shiftmax) needs int8 with a per-tensor or per-head dynamic absmax scale (e.g. int8/tensor; "
                                   "not amax:signed, whose scale carries a sign)");
    }
  }
  if (r.p.unit_scale || r.p.spec.format != FormatId::int8 || r.p.spec.multiplier != 127) {
    bad_field("p", "an integer softmax (qflash, shiftmax) produces int8 P: use p=int8/static:127");
  }
  if (r.pv_acc.kind != Accumulator::Kind::exact || r.qk_acc.kind != Accumulator::Kind::exact) {
    bad_field("acc", "an integer softmax accumulates in integers: use acc.qk=exact and acc.pv=exact");
  }
  if (r.split_k != 1 || r.lazy_rescale_tau != 0 || r.k_smoothing != KSmoothing::none || r.q_smoothing || r.v_smoothing || r.rotation != Rotation::none) {
    bad_field("softmax", "an integer softmax runs without split-K, lazy rescale, smoothing or rotation");
  }
}

void check_ksmooth_format(const Recipe& r) {
  if (r.k_smoothing_format != FormatId::fp32 && r.k_smoothing_format != FormatId::fp16 && r.k_smoothing_format != FormatId::bf16) {
    bad_field("ksmooth.format", std::string("'") + name_of(r.k_smoothing_format) + "': expected fp32, fp16 or bf16");
  }
  if (r.k_smoothing_format != FormatId::fp32 && r.k_smoothing != KSmoothing::global_mean && r.k_smoothing != KSmoothing::block_mean) {
    bad_field("ksmooth.format", "a K-mean format needs ksmooth=global or ksmooth=block");
  }
}

// A float-softmax choice moved (`moved`) under an integer softmax.
void float_softmax_only(const Recipe& r, bool moved, const char* field, const char* why) {
  if (moved && r.softmax != SoftmaxKind::float_online) bad_field(field, why);
}

constexpr const char* kVendorFields = "expform/rowsum/norm/exp2";
constexpr const char* kVendorWhy = "the vendor math of the float softmax: they need softmax=float";
constexpr const char* kFloatChoiceFields = "qprescale/qkscale/pad";
constexpr const char* kFloatChoiceWhy = "these are float-softmax choices: they need softmax=float";

void check_expform(const Recipe& r) {
  float_softmax_only(r, r.exp_form != ExpForm::lab, kVendorFields, kVendorWhy);
  if (r.exp_form == ExpForm::aten && (r.split_k != 1 || r.q_prescale || r.lazy_rescale_tau != 0)) {
    bad_field("expform", "aten keeps m on the scaled scores in natural-log units, as ATen's CPU kernel does, one split without a prescaled Q "
                         "or lazy rescale: expected split=1, qprescale=0, tau=0");
  }
  if (r.exp_form == ExpForm::fa && r.lazy_rescale_tau != 0) {
    bad_field("expform", "fa keeps the running max on raw scores; the lazy rescale's tau is in exp2 units: use one of them (tau=0)");
  }
}

void check_order(const Recipe& r) {
  if (r.reverse_key_tiles && (r.split_k != 1 || r.softmax != SoftmaxKind::float_online)) {
    bad_field("order", "reverse key tiles are modelled for the float softmax without key splits (split=1)");
  }
}

void check_kzero(const Recipe& r) {
  if (r.k_zero_q_sum && (r.q.unit_scale || r.k.unit_scale || format_of(r.q.spec.format).kind != Kind::integer || r.k.spec.format != FormatId::int4 ||
                         r.k.spec.granularity != Granularity::group || r.q_smoothing || r.k_smoothing != KSmoothing::none ||
                         r.rotation != Rotation::none || r.qk_scale_sequential)) {
    bad_field("kzero", "qsum takes int4 K (stored as codes + 8) and integer Q with group scales, without smoothing, rotation or qkscale (e.g. "
                       "q=int8/group:32 k=int4/group:32/scale:fp16/amax:signed)");
  }
}

void check_out(const Recipe& r) {
  if (r.out != FormatId::fp32 && r.out != FormatId::fp16 && r.out != FormatId::bf16) {
    bad_field("out", std::string("'") + name_of(r.out) + "': expected fp32, fp16 or bf16 (the output format the kernel stores)");
  }
}

// Canonical order: how to_string and to_json write a recipe.
const RecipeKnob kKnobs[] = {
    {"q", QATTN_OPERAND(q), [](const Recipe& r) { return operand_variants(r.q); }, 1, QATTN_INT_QK(""), kEveryFamily, &check_q},
    {"k", QATTN_OPERAND(k), [](const Recipe& r) { return operand_variants(r.k); }, 2, QATTN_INT_QK(""), kEveryFamily, &check_k},
    {"p", QATTN_OPERAND(p), &p_variants, 4, "p=e4m3/static:448", kEveryFamily, &check_p},
    {"v", QATTN_OPERAND(v), [](const Recipe& r) { return operand_variants(r.v); }, 3, "v=e4m3/channel", kEveryFamily, &check_v},
    {"ksmooth", QATTN_ENUM(k_smoothing, kKSmooth), nullptr, QATTN_RESET(k_smoothing), [](const Recipe&) { return Values{"none", "global"}; }, 10,
     QATTN_INT_QK("ksmooth=global"), kMma | kDot4},
    {"ksmooth_block", [](Recipe& r, const std::string& v, const std::string& w) { r.k_smoothing_block = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.k_smoothing_block); }, nullptr, QATTN_RESET(k_smoothing_block), nullptr, 0,
     QATTN_INT_QK("ksmooth=block ksmooth_block=32"), kMma | kDot4, &check_ksmooth_block},
    {"qsmooth", QATTN_ENUM(q_smoothing, kBool), nullptr, QATTN_RESET(q_smoothing), nullptr, 0, QATTN_INT_QK("qsmooth=1"), kDot4},
    {"vsmooth", QATTN_ENUM(v_smoothing, kBool), nullptr, QATTN_RESET(v_smoothing), nullptr, 0, "vsmooth=1", kDot4},
    {"rotation", QATTN_ENUM(rotation, kRotation), nullptr, QATTN_RESET(rotation), nullptr, 0, QATTN_INT_QK("rotation=hadamard"), kMma | kDot4},
    {"softmax", QATTN_ENUM(softmax, kSoftmax), nullptr, QATTN_RESET(softmax), nullptr, 0,
     "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash", kInteger, &check_softmax},
    {"denominator", QATTN_ENUM(denominator, kDenominator), nullptr, QATTN_RESET(denominator),
     [](const Recipe&) { return Values{"quantized", "float"}; }, 14, "p=e4m3/static:448 denominator=float", kMma | kWgmma | kDecode | kDot4},
    {"acc.qk", [](Recipe& r, const std::string& v, const std::string& w) { r.qk_acc = accumulator_from_string(v, w); },
     [](const Recipe& r) { return accumulator_to_string(r.qk_acc); }, nullptr, QATTN_RESET(qk_acc), &accumulator_values, 20, "acc.qk=fp16",
     kEveryFamily, [](const Recipe& r) { check_acc(r.qk_acc, "acc.qk"); }},
    {"acc.pv", [](Recipe& r, const std::string& v, const std::string& w) { r.pv_acc = accumulator_from_string(v, w); },
     [](const Recipe& r) { return accumulator_to_string(r.pv_acc); }, nullptr, QATTN_RESET(pv_acc), &accumulator_values, 21, "acc.pv=fp16",
     kEveryFamily, [](const Recipe& r) { check_acc(r.pv_acc, "acc.pv"); }},
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
     kEveryFamily, &check_tiles},
    {"split", [](Recipe& r, const std::string& v, const std::string& w) { r.split_k = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_k); }, nullptr, QATTN_RESET(split_k), nullptr, 0, "split=2", kDecode | kDot4, &check_split},
    {"split.pad", [](Recipe& r, const std::string& v, const std::string& w) { r.split_pad = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_pad); }, [](const Recipe& r) { return r.split_pad != 0; }, QATTN_RESET(split_pad), nullptr,
     0, "tiles=64x1 split=2 split.pad=256", kNoFamily, &check_split_pad},
    {"split.min", [](Recipe& r, const std::string& v, const std::string& w) { r.split_min = parse_int(v, w); },
     [](const Recipe& r) { return std::to_string(r.split_min); }, [](const Recipe& r) { return r.split_min != 0; }, QATTN_RESET(split_min), nullptr,
     0, "tiles=64x1 split=2 split.pad=256 split.min=512", kNoFamily, &check_split_min},
    {"tau", [](Recipe& r, const std::string& v, const std::string& w) { r.lazy_rescale_tau = parse_number(v, w); },
     [](const Recipe& r) { return num(r.lazy_rescale_tau); }, nullptr, QATTN_RESET(lazy_rescale_tau), nullptr, 0, "tau=2", kDot4, &check_tau},
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
     QATTN_INT_QK("ksmooth=global ksmooth.format=fp16"), kDot4, &check_ksmooth_format},
    {"qprescale", QATTN_ENUM(q_prescale, kBool), [](const Recipe& r) { return r.q_prescale; }, QATTN_RESET(q_prescale),
     [](const Recipe&) { return Values{"0", "1"}; }, 12, QATTN_INT_QK("qprescale=1"), kNoFamily,
     [](const Recipe& r) { float_softmax_only(r, r.q_prescale, kFloatChoiceFields, kFloatChoiceWhy); }},
    {"qkscale", QATTN_ENUM(qk_scale_sequential, kQkScale), [](const Recipe& r) { return r.qk_scale_sequential; }, QATTN_RESET(qk_scale_sequential),
     [](const Recipe&) { return Values{"joint", "sequential"}; }, 13, QATTN_INT_QK("qkscale=sequential"), kNoFamily,
     [](const Recipe& r) { float_softmax_only(r, r.qk_scale_sequential, kFloatChoiceFields, kFloatChoiceWhy); }},
    {"pad", QATTN_ENUM(pad_keys_zero, kPad), [](const Recipe& r) { return r.pad_keys_zero; }, QATTN_RESET(pad_keys_zero),
     [](const Recipe&) { return Values{"none", "zero"}; }, 15, "pad=zero", kNoFamily,
     [](const Recipe& r) { float_softmax_only(r, r.pad_keys_zero, kFloatChoiceFields, kFloatChoiceWhy); }},
    {"kzero", QATTN_ENUM(k_zero_q_sum, kKZero), [](const Recipe& r) { return r.k_zero_q_sum; }, QATTN_RESET(k_zero_q_sum),
     [](const Recipe& r) {
       const bool int4_groups = !r.k.unit_scale && r.k.spec.format == FormatId::int4 && r.k.spec.granularity == Granularity::group &&
                                r.q.spec.granularity == Granularity::group;
       return int4_groups ? Values{"codes", "qsum"} : Values{};
     },
     16, "q=int8/group:32 k=int4/group:32/scale:fp16/amax:signed kzero=qsum", kNoFamily, &check_kzero},
    {"order", QATTN_ENUM(reverse_key_tiles, kOrder), [](const Recipe& r) { return r.reverse_key_tiles; }, QATTN_RESET(reverse_key_tiles),
     [](const Recipe& r) { return r.split_k == 1 && r.softmax == SoftmaxKind::float_online ? Values{"forward", "reverse"} : Values{}; }, 17,
     "order=reverse", kDot4, &check_order},
    {"out", [](Recipe& r, const std::string& v, const std::string& w) { r.out = parse_format(v, w); },
     [](const Recipe& r) { return std::string(name_of(r.out)); }, [](const Recipe& r) { return r.out != FormatId::fp32; }, QATTN_RESET(out),
     [](const Recipe&) { return Values{"fp32", "fp16", "bf16"}; }, 18, "out=bf16", kHostQuantized, &check_out},
    // The float softmax's vendor math (recipe.hpp): written only when moved, so earlier recipes print as before.
    {"expform", QATTN_ENUM(exp_form, kExpForm), [](const Recipe& r) { return r.exp_form != ExpForm::lab; }, QATTN_RESET(exp_form),
     [](const Recipe& r) {
       if (r.softmax != SoftmaxKind::float_online || r.lazy_rescale_tau != 0) return Values{};
       return r.split_k == 1 && !r.q_prescale ? Values{"lab", "fa", "aten"} : Values{"lab", "fa"};
     }, 19,
     "expform=fa", kDot4, &check_expform},
    {"rowsum", QATTN_ENUM(row_sum, kRowSum), [](const Recipe& r) { return r.row_sum != RowSum::sequential; }, QATTN_RESET(row_sum),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"sequential", "lanes", "vec16"} : Values{}; }, 20, "rowsum=lanes",
     kDot4, [](const Recipe& r) { float_softmax_only(r, r.row_sum != RowSum::sequential, kVendorFields, kVendorWhy); }},
    {"norm", QATTN_ENUM(norm, kNorm), [](const Recipe& r) { return r.norm != Norm::div; }, QATTN_RESET(norm),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"div", "rcp", "sfu"} : Values{}; }, 21, "norm=rcp", kDot4,
     [](const Recipe& r) { float_softmax_only(r, r.norm != Norm::div, kVendorFields, kVendorWhy); }},
    {"exp2", QATTN_ENUM(exp2, kExp2), [](const Recipe& r) { return r.exp2 != Exp2Math::rn; }, QATTN_RESET(exp2),
     [](const Recipe& r) { return r.softmax == SoftmaxKind::float_online ? Values{"rn", "sfu"} : Values{}; }, 22, "exp2=sfu", kDot4,
     [](const Recipe& r) { float_softmax_only(r, r.exp2 != Exp2Math::rn, kVendorFields, kVendorWhy); }},
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

void validate(const Recipe& r) {
  for (const RecipeKnob& k : recipe_knobs())
    if (k.check != nullptr) k.check(r);
}

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
