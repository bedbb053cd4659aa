#include "harness/io/recipe_io.hpp"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

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
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) bad(what, "'" + s + "' is not a number");
  if (!std::isfinite(v)) bad(what, "'" + s + "' is not a finite number");
  return v;
}

int parse_int(const std::string& s, const std::string& what) {
  const double v = parse_number(s, what);
  if (v != std::floor(v) || std::fabs(v) > 1e9) bad(what, "'" + s + "' is not an integer");
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
constexpr std::pair<const char*, bool> kBool[] = {{"0", false}, {"1", true}, {"false", false}, {"true", true}};

std::string acc_to_string(const Accumulator& a) {
  switch (a.kind) {
    case Accumulator::Kind::exact: return "exact";
    case Accumulator::Kind::fp32: return "fp32";
    case Accumulator::Kind::fp16: return "fp16";
    case Accumulator::Kind::mma:
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
  if (s == "h200_hmma") return h200_hmma_accumulator();  // measured presets (kernels/numerics/accumulator.hpp)
  if (s == "h200_e4m3_mma") return h200_e4m3_mma_accumulator();
  if (s == "h200_wgmma_f16") return h200_wgmma_f16_accumulator();
  if (s == "h200_hmma_tile") return h200_hmma_tile_accumulator();
  if (s == "h200_e4m3_wgmma") return h200_e4m3_wgmma_accumulator();
  if (s == "h200_e4m3_wgmma_tile") return h200_e4m3_wgmma_tile_accumulator();
  if (s == "h200_wgmma_bf16") return h200_wgmma_bf16_accumulator();
  if (s == "h200_wgmma_bf16_tile") return h200_wgmma_bf16_tile_accumulator();
  if (s == "exact") a.kind = Accumulator::Kind::exact;
  else if (s == "fp32") a.kind = Accumulator::Kind::fp32;
  else if (s == "fp16") a.kind = Accumulator::Kind::fp16;
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
    bad(what, "'" + s + "': expected exact, fp32, fp16, h200_hmma, h200_hmma_tile, h200_e4m3_mma, h200_e4m3_wgmma, "
              "h200_e4m3_wgmma_tile, h200_wgmma_f16, h200_wgmma_bf16, h200_wgmma_bf16_tile or "
              "mma(chunk=..,align=..,chunk_bits=..,chunk_round=even|zero,acc_bits=..,add_round=even|zero,flush=..,fused=0|1,"
              "factor_emin=..)");
  }
  return a;
}

// The keys of both forms, in canonical order.
const char* const kKeys[] = {"q", "k", "p", "v", "ksmooth", "ksmooth_block", "qsmooth", "vsmooth", "rotation", "softmax",
                             "denominator", "acc.qk", "acc.pv", "tiles", "split", "tau", "qflash.consts", "qflash.exp",
                             "qflash.requant", "qflash.release", "qflash.start", "qflash.tail", "qflash.div", "ksmooth.format",
                             "qprescale", "qkscale", "pad", "out"};

// Keys the canonical forms write only where they apply: the qflash.* keys with softmax=qflash,
// `out` when it is not fp32 (so recipes without them read as they always did).
bool key_applies(const Recipe& r, const std::string& key) {
  if (key.rfind("qflash.", 0) == 0) return r.softmax == SoftmaxKind::qflash_integer;
  if (key == "out") return r.out != FormatId::fp32;
  if (key == "ksmooth.format") return r.k_smoothing_format != FormatId::fp32;
  if (key == "qprescale") return r.q_prescale;
  if (key == "qkscale") return r.qk_scale_sequential;
  if (key == "pad") return r.pad_keys_zero;
  return true;
}

void set_key(Recipe& r, const std::string& key, const std::string& value, const std::string& what) {
  if (key == "q") r.q = operand_from_string(value, what);
  else if (key == "k") r.k = operand_from_string(value, what);
  else if (key == "p") r.p = operand_from_string(value, what);
  else if (key == "v") r.v = operand_from_string(value, what);
  else if (key == "ksmooth") r.k_smoothing = parse_enum(value, what, kKSmooth);
  else if (key == "ksmooth_block") r.k_smoothing_block = parse_int(value, what);
  else if (key == "qsmooth") r.q_smoothing = parse_enum(value, what, kBool);
  else if (key == "vsmooth") r.v_smoothing = parse_enum(value, what, kBool);
  else if (key == "rotation") r.rotation = parse_enum(value, what, kRotation);
  else if (key == "softmax") r.softmax = parse_enum(value, what, kSoftmax);
  else if (key == "denominator") r.denominator = parse_enum(value, what, kDenominator);
  else if (key == "acc.qk") r.qk_acc = acc_from_string(value, what);
  else if (key == "acc.pv") r.pv_acc = acc_from_string(value, what);
  else if (key == "tiles") {
    const auto x = value.find('x');
    if (x == std::string::npos) bad(what, "'" + value + "': expected BRxBC, e.g. 64x64");
    r.tiles.block_q = parse_int(value.substr(0, x), what);
    r.tiles.block_k = parse_int(value.substr(x + 1), what);
  } else if (key == "split") r.split_k = parse_int(value, what);
  else if (key == "tau") r.lazy_rescale_tau = parse_number(value, what);
  else if (key == "qflash.consts") r.qflash.constants = parse_enum(value, what, kQfConsts);
  else if (key == "qflash.exp") r.qflash.exp = parse_enum(value, what, kQfExp);
  else if (key == "qflash.requant") r.qflash.requant = parse_enum(value, what, kQfRequant);
  else if (key == "qflash.release") r.qflash.release = parse_enum(value, what, kQfRelease);
  else if (key == "qflash.start") r.qflash.start = parse_enum(value, what, kQfStart);
  else if (key == "qflash.tail") r.qflash.tail = parse_enum(value, what, kQfTail);
  else if (key == "qflash.div") r.qflash.division = parse_enum(value, what, kQfDiv);
  else if (key == "out") r.out = parse_format(value, what);
  else if (key == "ksmooth.format") r.k_smoothing_format = parse_format(value, what);
  else if (key == "qprescale") r.q_prescale = parse_enum(value, what, kBool);
  else if (key == "qkscale") r.qk_scale_sequential = parse_enum(value, what, kQkScale);
  else if (key == "pad") r.pad_keys_zero = parse_enum(value, what, kPad);
  else {
    std::string known;
    for (const char* k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
    bad(what, "unknown key '" + key + "'; expected one of: " + known);
  }
}

std::string get_key(const Recipe& r, const std::string& key) {
  if (key == "q") return operand_to_string(r.q);
  if (key == "k") return operand_to_string(r.k);
  if (key == "p") return operand_to_string(r.p);
  if (key == "v") return operand_to_string(r.v);
  if (key == "ksmooth") return enum_name(r.k_smoothing, kKSmooth);
  if (key == "ksmooth_block") return std::to_string(r.k_smoothing_block);
  if (key == "qsmooth") return r.q_smoothing ? "1" : "0";
  if (key == "vsmooth") return r.v_smoothing ? "1" : "0";
  if (key == "rotation") return enum_name(r.rotation, kRotation);
  if (key == "softmax") return enum_name(r.softmax, kSoftmax);
  if (key == "denominator") return enum_name(r.denominator, kDenominator);
  if (key == "acc.qk") return acc_to_string(r.qk_acc);
  if (key == "acc.pv") return acc_to_string(r.pv_acc);
  if (key == "tiles") return std::to_string(r.tiles.block_q) + "x" + std::to_string(r.tiles.block_k);
  if (key == "split") return std::to_string(r.split_k);
  if (key == "tau") return num(r.lazy_rescale_tau);
  if (key == "qflash.consts") return enum_name(r.qflash.constants, kQfConsts);
  if (key == "qflash.exp") return enum_name(r.qflash.exp, kQfExp);
  if (key == "qflash.requant") return enum_name(r.qflash.requant, kQfRequant);
  if (key == "qflash.release") return enum_name(r.qflash.release, kQfRelease);
  if (key == "qflash.start") return enum_name(r.qflash.start, kQfStart);
  if (key == "qflash.tail") return enum_name(r.qflash.tail, kQfTail);
  if (key == "qflash.div") return enum_name(r.qflash.division, kQfDiv);
  if (key == "out") return name_of(r.out);
  if (key == "ksmooth.format") return name_of(r.k_smoothing_format);
  if (key == "qprescale") return r.q_prescale ? "1" : "0";
  if (key == "qkscale") return enum_name(r.qk_scale_sequential, kQkScale);
  if (key == "pad") return enum_name(r.pad_keys_zero, kPad);
  return "";
}

// Accumulators the user did not name: integer operands sum exactly (int32), as every kernel does.
void default_integer_accumulators(Recipe& r, bool qk_given, bool pv_given) {
  const bool int_qk = !r.q.unit_scale && format_of(r.q.spec.format).kind == Kind::integer && !r.k.unit_scale &&
                      format_of(r.k.spec.format).kind == Kind::integer;
  if (int_qk && !qk_given) r.qk_acc.kind = Accumulator::Kind::exact;
  if (r.softmax != SoftmaxKind::float_online && !pv_given) r.pv_acc.kind = Accumulator::Kind::exact;
}

// Defaults of the text forms: no quantization, fp32 accumulation, 64x64 tiles.
Recipe default_recipe() {
  Recipe r;
  for (OperandQuant* o : {&r.q, &r.k, &r.p, &r.v}) {
    o->spec.format = FormatId::fp32;
    o->unit_scale = true;
  }
  return r;
}

}  // namespace

const std::vector<RecipePreset>& recipe_presets() {
  static const std::vector<RecipePreset> presets = {
      {"qflash-46adca5",
       "q=int8/tensor/scale:fp16/div:fp16 k=int8/tensor/scale:fp16/div:fp16 v=int8/tensor/scale:fp16/div:fp16 p=int8/static:127 "
       "softmax=qflash acc.qk=exact acc.pv=exact tiles=32x32 qflash.consts=kernel qflash.exp=fixed16 qflash.requant=round16 "
       "qflash.release=shift30 qflash.start=kernel qflash.tail=pad qflash.div=trunc32 out=fp16",
       "github EfficientCompLab/qflash, commit 46adca5, qflash/kernel.py (qflash_forward, unmasked kernel, default settings)",
       "fp16 inputs of one batch (its per-tensor scale is int8/tensor), not causal; the kernel's approximate fp32 division "
       "can put an output one int8 level lower"},
      {"sageattn-1.0.6",
       "q=int8/block:128/amax:mul/round:away k=int8/block:64/amax:mul/round:away ksmooth=global ksmooth.format=fp16 qprescale=1 "
       "qkscale=sequential acc.qk=exact p=fp16 v=fp16 denominator=float tiles=128x64 acc.pv=h200_wgmma_f16 pad=zero out=fp16",
       "PyPI sageattention==1.0.6 (sageattention/core.py, quant_per_block.py, attn_qk_int8_per_block.py and _causal.py), on the H200 with Triton 3.6",
       "fp16 inputs, head dims 64 and 128; not modelled: the GPU's approximate reciprocal in the quantizer and the final division, "
       "its approximate exp2, fused multiply-adds, and the row sums' tree order"},
      {"sageattn2-sm90",
       "q=int8/block:2/amax:mul/round:away k=int8/block:32/amax:mul/round:away ksmooth=global ksmooth.format=fp16 acc.qk=exact p=e4m3/static:447.8898 v=e4m3/channel denominator=float tiles=64x128 acc.pv=mma(chunk=32,align=32,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=4) out=fp16",
       "github thu-ml/SageAttention, commit d1a57a5, sageattention/core.py, triton/quant_per_thread.py, csrc/qattn/qk_int_sv_f8_cuda_sm90.cu, attn_utils.cuh",
       "read from source, not run: per-thread Q scales over strided rows (r, r+8) taken as consecutive rows, the +1e-7 on each scale, V's scale applied after the division, and the 13-bit two-level e4m3 wgmma accumulator as its documentation states it (not measured)"},
      {"sageattn2-sm89",
       "q=int8/block:4/amax:mul/round:away k=int8/block:16/amax:mul/round:away ksmooth=global ksmooth.format=fp16 acc.qk=exact p=e4m3/static:447.8898 v=e4m3/channel denominator=float tiles=128x64 acc.pv=mma(chunk=32,align=32,chunk_bits=10,chunk_round=even,acc_bits=10,add_round=even,flush=2) out=fp16",
       "github thu-ml/SageAttention, commit d1a57a5, sageattention/core.py, csrc/qattn/attn_utils.cuh (the fp32+fp16 default)",
       "read from source, not run: as sageattn2-sm90, and V's 2.25 scale maximum and the fp16 buffer's exponent range are not modelled"},
      {"fa3-fp8",
       "q=e4m3/head k=e4m3/head v=e4m3/head p=e4m3/static:256 denominator=float tiles=192x160 acc.qk=mma(chunk=32,align=32,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=0) acc.pv=mma(chunk=32,align=32,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=0) out=bf16",
       "github Dao-AILab/flash-attention, commit 0251105, hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, flash_fwd_kernel_sm90.h, softmax.h",
       "read from source, not run: the descales are the caller's (taken as absmax/448 per head), one PV accumulator over all keys, the wgmma accumulator's 13 bits assumed, not measured"},
      {"llamacpp-q8_0",
       "q=int8/group:32/div k=int8/group:32/scale:fp16/round:away v=int8/group:32/scale:fp16 acc.qk=exact p=fp32 acc.pv=fp32 tiles=1x32 split=4",
       "github ggml-org/ggml, commit d99724f (synced from llama.cpp d3cf1f1), src/ggml-cuda/fattn-common.cuh, fattn-vec.cuh (the CUDA vector kernel, NVIDIA)",
       "read from source, not run: Q's codes come from the fp32 scale while fp16 is stored, roundf ties, fp32 partial sums per 4 elements, the interleaved key split"},
      {"llamacpp-q4_0",
       "q=int8/group:32/div k=int4/group:32/scale:fp16 v=int4/group:32/scale:fp16 acc.qk=exact p=fp32 acc.pv=fp32 tiles=1x32 split=4",
       "github ggml-org/ggml, commit d99724f (synced from llama.cpp d3cf1f1), src/ggml-cuda/fattn-common.cuh, fattn-vec.cuh, ggml-quants.c",
       "read from source, not run: q4_0's own grid (absmax/8, codes -8..7, rounded half up) is not the lab's symmetric int4 at absmax/7, a large part of its low score"},
      {"zinc",
       "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=fp32",
       "the ZINC write-up's prefill recipe: int8 Q K^T with K's mean removed, e4m3 P at 448 and e4m3 V",
       "read from its description, not run: Q/K granularity and V's scale are not stated (token and channel assumed); its decode path with a running mean in the int8 K cache is left out (the lab's ksmooth=running does not reproduce its claim)"},
      {"dot4-packed16",
       "q=int8/group:32 k=int8/group:32/scale:fp16 v=fp16 acc.qk=exact p=fp32 acc.pv=fp32 tiles=8x8",
       "the DOT4 write-up's sudot4 flash attention for llama.cpp HIP on RDNA3: int8 K with fp16 scales per 32 channels",
       "read from its description, not run: Q's scale layout is ambiguous there (group:32 assumed, as the lab needs equal groups on Q and K)"},
      {"qflash-lab", "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash acc.qk=exact acc.pv=exact",
       "the QFlash paper's algorithm with the lab's constants (kernels/numerics/qflash.hpp)",
       "the lab's reading of the paper, before its kernel was public; the GPU family flash_integer runs it"},
  };
  return presets;
}

std::string operand_to_string(const OperandQuant& o) {
  std::string s = name_of(o.spec.format);
  if (o.unit_scale) return s;
  if (o.spec.rule == ScaleRule::static_multiplier) {
    s += "/static:" + num(o.spec.multiplier);
  } else {
    s += std::string("/") + name_of(o.spec.granularity);
    if (o.spec.granularity == Granularity::block || o.spec.granularity == Granularity::group) s += ":" + std::to_string(o.spec.block);
  }
  if (o.spec.scale_format != FormatId::fp32) s += std::string("/scale:") + name_of(o.spec.scale_format);
  if (o.spec.divide) s += std::string("/div:") + name_of(o.spec.quotient_format);
  if (o.spec.amax_mul) s += "/amax:mul";
  if (o.spec.half_away) s += "/round:away";
  return s;
}

static OperandQuant parse_operand(const std::string& s, const std::string& what) {
  const std::vector<std::string> parts = split(s, '/');
  if (parts.empty() || parts[0].empty()) bad(what, "empty operand; expected FORMAT[/GRANULARITY[:N]][/static:S][/scale:FORMAT][/div[:FORMAT]]");
  OperandQuant o;
  o.spec.format = parse_format(parts[0], what);
  o.unit_scale = parts.size() == 1;
  if (o.unit_scale && format_of(o.spec.format).kind == Kind::integer) {
    bad(what, "'" + s + "': an integer format needs a granularity or a static scale, e.g. " + parts[0] + "/token");
  }
  bool have_rule = false;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const auto colon = p.find(':');
    const std::string head = p.substr(0, colon), arg = colon == std::string::npos ? "" : p.substr(colon + 1);
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
      if (arg != "mul") bad(what, "'" + s + "': amax takes 'mul' (the scale as absmax x fp32(1/max))");
      o.spec.amax_mul = true;
    } else if (head == "round") {
      if (arg != "away") bad(what, "'" + s + "': round takes 'away' (ties away from zero by an fp32 add of 0.5, then truncation)");
      o.spec.half_away = true;
    } else if (head == "div") {
      o.spec.divide = true;
      o.spec.quotient_format = arg.empty() ? FormatId::fp32 : parse_format(arg, what + " div");
    } else {
      if (have_rule) bad(what, "'" + s + "': give one granularity or one static scale");
      o.spec.granularity = parse_granularity(head, what);
      if (o.spec.granularity == Granularity::block || o.spec.granularity == Granularity::group) {
        if (arg.empty()) bad(what, "'" + s + "': " + head + " needs a size, e.g. " + head + ":32");
        o.spec.block = parse_int(arg, what + " " + head);
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
  Recipe r = default_recipe();
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
  default_integer_accumulators(r, given("acc.qk"), given("acc.pv"));
  validate(r);
  return r;
}

std::string to_string(const Recipe& r) {
  std::string s;
  for (const char* k : kKeys) {
    if (!key_applies(r, k)) continue;
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += get_key(r, k);
  }
  return s;
}

nlohmann::json to_json(const Recipe& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* k : kKeys)
    if (key_applies(r, k)) j[k] = get_key(r, k);
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
  Recipe r = default_recipe();
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) bad(where + ": key 'preset'", "expected a preset name");
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
      if (value.contains("granularity")) {
        text += "/" + str("granularity");
        if (value.contains("block")) text += ":" + parse_text_int(number("block"), what + ".block");
      }
      if (value.contains("scale_format")) text += "/scale:" + str("scale_format");
      if (value.contains("divide")) text += "/div:" + str("divide");
      if (flag("amax_mul")) text += "/amax:mul";
      if (flag("round_away")) text += "/round:away";
      for (const auto& [k2, v2] : value.items()) {
        (void)v2;
        if (k2 != "format" && k2 != "static" && k2 != "granularity" && k2 != "block" && k2 != "scale_format" && k2 != "divide" &&
            k2 != "amax_mul" && k2 != "round_away") {
          bad(what, "unknown operand key '" + k2 + "'; expected format, granularity, block, static, scale_format, divide, amax_mul, round_away");
        }
      }
    } else {
      bad(what, "expected a string, number or boolean");
    }
    set_key(r, key, text, what);
  }
  default_integer_accumulators(r, j.contains("acc.qk") || j.contains("preset"), j.contains("acc.pv") || j.contains("preset"));
  try {
    validate(r);
  } catch (const std::invalid_argument& e) {
    bad(where, e.what());
  }
  return r;
}

}  // namespace qattn
