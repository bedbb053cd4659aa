#include "kernels/gpu/dispatch.hpp"

#include <cmath>
#include <stdexcept>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/numerics/accumulator.hpp"
#include "kernels/numerics/qflash.hpp"
#include "kernels/numerics/prepare_cpu.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/recipe/recipe_text.hpp"  // operand_to_string

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"
#include "kernels/gpu/prepare/prepare.hpp"
#include "kernels/gpu/common/query_rows.hpp"  // the row families' shape limits

namespace qattn::gpu {

namespace {

bool integer_codes(const OperandQuant& o) { return !o.unit_scale && format_of(o.spec.format).kind == Kind::integer; }

// Scale groups along d of an integer operand (one unless group granularity).
int scale_groups(const OperandQuant& o, int dim) { return o.spec.granularity == Granularity::group ? dim / o.spec.block : 1; }

// Why a one-wave-per-row family (dot4, integer) cannot take this head dim or key tile ("" if it can).
std::string wave_shape_not_covered(int dim, int block_k, bool tiled) {
  const int ws = dot4_wave_size();
  if (tiled && (block_k % ws != 0 || block_k > kMaxKeysPerLane * ws)) {
    return "the key tile must be a multiple of the wave size (" + std::to_string(ws) + "), at most " + std::to_string(kMaxKeysPerLane * ws);
  }
  if (dim % ws != 0 || dim > kMaxChannelsPerLane * ws) {
    return "the head dim must be a multiple of the wave size (" + std::to_string(ws) + "), at most " + std::to_string(kMaxChannelsPerLane * ws);
  }
  return "";
}

// An integer format's codes as signed bytes.
std::vector<std::int8_t> signed_codes(const QuantizedTensor& t, FormatId format) {
  const Format f = format_of(format);
  std::vector<std::int8_t> out;
  out.reserve(t.codes.size());
  for (auto c : t.codes) out.push_back(static_cast<std::int8_t>(decode(f, c)));
  return out;
}

bool needs_preparation(const Recipe& r) { return r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none || r.q_smoothing; }

}  // namespace

std::string dot4_not_covered(const Problem& p, const Recipe& r) {
  const int d = p.q.dim;
  const bool int_q = integer_codes(r.q), int_k = integer_codes(r.k);
  if (int_q != int_k) return "QK^T: Q and K must both be integer codes with scales, or both values";
  if (int_q) {
    for (const auto* o : {&r.q, &r.k}) {
      const Granularity g = o->spec.granularity;
      if (format_of(o->spec.format).bits > 8 || g == Granularity::channel) {
        return "QK^T: integer Q and K of at most 8 bits with one scale per (head, token, group): tensor, head, token, block or group scales";
      }
    }
    const int groups = scale_groups(r.q, d);
    if (groups != scale_groups(r.k, d) || (d / groups) % 4 != 0) return "QK^T: Q and K scale groups must match and hold a multiple of 4 channels";
    if (r.qk_acc.kind != Accumulator::Kind::exact) return "QK^T of integer codes accumulates exactly (int32)";
  }
  if (needs_preparation(r) && (scaled_after_qk(r, r.q) || scaled_after_qk(r, r.k))) {
    return "QK^T: prepared (smoothed or rotated) scaled float Q or K under a matrix unit's model is emulator-only";
  }
  if (needs_preparation(r)) {
    const std::string why = prepare_not_covered(r, d, false);
    if (!why.empty()) return why;
  }
  if (!r.p.unit_scale && r.p.spec.rule != ScaleRule::static_multiplier) return "P needs a static multiplier";
  if (r.split_k > kMaxDot4Splits) return "split-K takes at most " + std::to_string(kMaxDot4Splits) + " splits";
  return wave_shape_not_covered(d, r.tiles.block_k, true);
}

namespace {

// Integer Q/K codes and their scales per (head, token, group), whatever the granularity, as the
// kernels read them; from the same quantizers the emulator uses.
struct IntQK {
  int groups = 1;
  std::vector<std::int8_t> q_codes, k_codes;
  std::vector<float> q_scales, k_scales;
};

IntQK int_qk(const Problem& p, const Recipe& r) {
  IntQK out;
  const int d = p.q.dim;
  out.groups = scale_groups(r.q, d);
  const auto scales = [&](const QuantizedTensor& t, int heads, int tokens, std::vector<float>& dst) {
    const int gs = d / out.groups;
    dst.resize(static_cast<std::size_t>(heads) * tokens * out.groups);
    for (int h = 0; h < heads; ++h)
      for (int n = 0; n < tokens; ++n)
        for (int g = 0; g < out.groups; ++g) dst[(static_cast<std::size_t>(h) * tokens + n) * out.groups + g] = t.scales[t.scale_index(h, n, g * gs)];
  };
  const QuantizedTensor q = quantize(p.q, r.q.spec), k = quantize(p.k, r.k.spec);
  out.q_codes = signed_codes(q, r.q.spec.format);
  out.k_codes = signed_codes(k, r.k.spec.format);
  scales(q, p.q.heads, p.q.tokens, out.q_scales);
  scales(k, p.k.heads, p.k.tokens, out.k_scales);
  return out;
}

// An operand's values as the emulator multiplies them: rounded to its format, or quantized and
// dequantized.
std::vector<float> operand_values(const TensorF& t, const OperandQuant& o) {
  if (!o.unit_scale) return dequantize(quantize(t, o.spec)).data;
  const Format f = format_of(o.spec.format);
  std::vector<float> v = t.data;
  for (float& x : v) x = static_cast<float>(round_to(f, x));
  return v;
}

// A float Q or K that an MMA model sees as codes (scaled_after_qk): its codes' values, and in
// row_scales the scale of each (head, token), as the emulator prepares it.
std::vector<float> operand_codes(const TensorF& t, const OperandQuant& o, std::vector<float>& row_scales) {
  const QuantizedTensor qt = quantize(t, o.spec);
  row_scales = token_scales(qt);
  return code_values(qt);
}

}  // namespace

Dot4Inputs make_inputs(const Problem& p, const Recipe& r) {
  Dot4Inputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  in.qk = integer_codes(r.q) ? Dot4Qk::integer : Dot4Qk::values;
  if (!needs_preparation(r)) {  // prepared recipes get Q and K from the preparation kernels
    if (in.qk == Dot4Qk::integer) {
      IntQK qk = int_qk(p, r);
      in.groups = qk.groups;
      in.q_codes = std::move(qk.q_codes);
      in.k_codes = std::move(qk.k_codes);
      in.q_scales = std::move(qk.q_scales);
      in.k_scales = std::move(qk.k_scales);
    } else {
      in.q_values = scaled_after_qk(r, r.q) ? operand_codes(p.q, r.q, in.q_row_scales) : operand_values(p.q, r.q);
      in.k_values = scaled_after_qk(r, r.k) ? operand_codes(p.k, r.k, in.k_row_scales) : operand_values(p.k, r.k);
    }
  }
  TensorF v = p.v;
  if (r.v_smoothing) in.v_means = smooth_v(v);  // on the host, as V's quantization here
  if (v_scaled_after_pv(r)) {  // V's codes' values; the scale multiplies O at the end
    const QuantizedTensor vq = quantize(v, r.v.spec);
    in.v = code_values(vq);
    in.v_column_scales = channel_scales(vq);
  } else {
    in.v = operand_values(v, r.v);
  }
  in.rows = p.rows.resolve(p.q.tokens);
  in.causal = p.causal;
  in.window = p.window;
  in.score_factor = static_cast<float>(p.scale()) * 1.44269504088896340736f;
  in.p_format = r.p.spec.format;
  in.p_multiplier = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  in.denominator_quantized = r.denominator == Denominator::quantized_p;
  in.out = r.out;
  in.reverse_key_tiles = r.reverse_key_tiles;
  in.qk_acc = r.qk_acc;
  in.pv_acc = r.pv_acc;
  in.lazy_rescale_tau = static_cast<float>(r.lazy_rescale_tau);
  in.split_k = r.split_k;
  in.block_k = r.tiles.block_k;
  return in;
}

namespace {

bool int8_token_scaled(const OperandQuant& o) {
  const Granularity g = o.spec.granularity;
  return !o.unit_scale && o.spec.format == FormatId::int8 && o.spec.rule == ScaleRule::dynamic_absmax &&
         (g == Granularity::tensor || g == Granularity::head || g == Granularity::token) && o.spec.scale_format == FormatId::fp32;
}

bool rounded_to(const OperandQuant& o, FormatId f) { return o.unit_scale && o.spec.format == f; }

// Rounded (no scale) to a format whose every value fp16 holds exactly: the fp16 HMMA multiplies it
// unchanged (e4m3: |x| <= 448, quantum >= 2^-9; e5m2: <= 57344, >= 2^-16; fp16's own 65504, 2^-24).
bool fp16_exact(const OperandQuant& o) {
  return rounded_to(o, FormatId::fp16) || rounded_to(o, FormatId::e4m3) || rounded_to(o, FormatId::e5m2);
}

}  // namespace

#if defined(QATTN_WITH_CUDA)
namespace {

// The two matrix-unit families take the same operands; they differ in the P V accumulation they
// run (what the instruction's accumulator does, measured) and in what else they implement.
struct MatrixFamily {
  const char* kernel;                        // for the messages
  bool (*e4m3_pv)(const Accumulator&, int);  // an e4m3 P V accumulation this family runs, by key tile
  bool (*fp16_pv)(const Accumulator&);       // and an fp16 one
  bool (*bf16_pv)(const Accumulator&);       // and a bf16 one (null: no bf16 operands at all)
  const char* e4m3_need;                     // what to write instead
  const char* fp16_need;
  const char* bf16_need;                     // with bf16_pv null: why bf16 operands are refused
  bool tile128;                              // 128-key tiles too (e4m3 P V, head dims up to 128)
};

const MatrixFamily kMmaFamily{
    "the mma kernel", [](const Accumulator& a, int) { return same_accumulator(a, h200_e4m3_mma_accumulator()); },
    [](const Accumulator& a) { return same_accumulator(a, h200_hmma_accumulator()); }, nullptr,
    "PV in e4m3 accumulates as the H200's mma.sync does: pv_acc must be h200_e4m3_mma",
    "PV in fp16 accumulates as the H200's HMMA does: pv_acc must be h200_hmma",
    "the mma kernel takes no bf16 operands (the wgmma kernel pairs bf16 QK^T with bf16 or e4m3 PV, and bf16 PV with int8 or "
    "bf16 QK^T)",
    false};

const MatrixFamily kWgmmaFamily{
    "the wgmma kernel",
    // Per tile: the tile's instructions (two per 64 keys) from zero, one fp32 add into O.
    [](const Accumulator& a, int block_k) {
      return same_accumulator(a, h200_e4m3_wgmma_accumulator()) ||
             same_accumulator(a, block_k == 128 ? h200_e4m3_wgmma_tile128_accumulator() : h200_e4m3_wgmma_tile_accumulator());
    },
    [](const Accumulator& a) { return same_accumulator(a, h200_hmma_tile_accumulator()); },
    [](const Accumulator& a) {
      return same_accumulator(a, h200_wgmma_bf16_accumulator()) || same_accumulator(a, h200_wgmma_bf16_tile_accumulator());
    },
    "PV in e4m3 accumulates as the H200's wgmma does: pv_acc must be h200_e4m3_wgmma (into O), or per key tile "
    "h200_e4m3_wgmma_tile (tiles.block_k 64) or h200_e4m3_wgmma_tile128 (tiles.block_k 128)",
    "PV in fp16 per 64-key tile: pv_acc must be h200_hmma_tile (h200_hmma, straight into O, runs in flash_mma)",
    "PV in bf16 accumulates as the H200's bf16 wgmma does: pv_acc must be h200_wgmma_bf16 (into O) or h200_wgmma_bf16_tile "
    "(per 64-key tile)",
    true};

// An mma(...) written out like a measured preset but for factor_emin (as recipe text written before
// that key existed would be): say so, since the rest of the message reads as if it matched.
std::string factor_emin_hint(const Accumulator& a) {
  for (const Accumulator& preset : {h200_hmma_accumulator(), h200_hmma_tile_accumulator(), h200_wgmma_bf16_accumulator(),
                                    h200_wgmma_bf16_tile_accumulator()}) {
    Accumulator same = a;
    same.factor_exponent_min = preset.factor_exponent_min;
    if (same_accumulator(same, preset) && !same_accumulator(a, preset)) {
      return " (yours differs from it only in factor_emin: the hardware reads a subnormal factor at exponent " +
             std::to_string(preset.factor_exponent_min) + ", mma(...,factor_emin=" + std::to_string(preset.factor_exponent_min) + "))";
    }
  }
  return "";
}

std::string matrix_not_covered(const Problem& p, const Recipe& r, const MatrixFamily& f) {
  const std::string k = f.kernel;
  const bool qk_int8 = int8_token_scaled(r.q) && int8_token_scaled(r.k);
  const bool qk_fp16 = fp16_exact(r.q) && fp16_exact(r.k);
  const bool qk_bf16 = rounded_to(r.q, FormatId::bf16) && rounded_to(r.k, FormatId::bf16);
  const bool any_bf16 = qk_bf16 || rounded_to(r.p, FormatId::bf16) || rounded_to(r.v, FormatId::bf16);
  if (any_bf16 && !f.bf16_pv) return f.bf16_need;
  if (!qk_int8 && !qk_fp16 && !qk_bf16) {
    return "QK^T: " + k + " takes int8 Q and K with tensor, head or token fp32 scales, or Q and K rounded (no scale) to fp16, "
           "e4m3 or e5m2" + (f.bf16_pv ? ", or both to bf16" : "");
  }
  if (qk_int8 && r.qk_acc.kind != Accumulator::Kind::exact) return "QK^T in int8 accumulates exactly (int32)";
  if (qk_fp16 && !same_accumulator(r.qk_acc, h200_hmma_accumulator())) {
    return "QK^T in fp16 accumulates as the H200's HMMA does: qk_acc must be h200_hmma" + factor_emin_hint(r.qk_acc);
  }
  if (qk_bf16 && !same_accumulator(r.qk_acc, h200_wgmma_bf16_accumulator())) {
    return "QK^T in bf16 accumulates as the H200's bf16 wgmma is modelled: qk_acc must be h200_wgmma_bf16";
  }
  if (r.k_smoothing == KSmoothing::block_mean_corrected) return k + " has no q . mu_b correction of block means (the dot4 family has)";
  if (r.tiles.block_k != kMmaKeyTile && !(f.tile128 && r.tiles.block_k == 128))
    return k + "'s key tile is 64" + (f.tile128 ? " or 128" : "") + " (tiles.block_k)";
  if (p.q.dim != 64 && p.q.dim != 128 && p.q.dim != 256) return k + " takes head dims 64, 128 and 256";
  const bool p_e4m3 = !r.p.unit_scale && r.p.spec.format == FormatId::e4m3 && r.p.spec.rule == ScaleRule::static_multiplier;
  const Granularity vg = r.v.spec.granularity;
  const bool v_e4m3 = rounded_to(r.v, FormatId::e4m3) ||
                      (!r.v.unit_scale && r.v.spec.format == FormatId::e4m3 && r.v.spec.rule == ScaleRule::dynamic_absmax &&
                       (vg == Granularity::tensor || vg == Granularity::head || vg == Granularity::channel) &&
                       r.v.spec.scale_format == FormatId::fp32);
  const bool prepared = needs_preparation(r);  // the knob table lets only flash_mma's preparation kernels take these
  if (r.tiles.block_k == 128) {
    if (!(p_e4m3 && v_e4m3)) return k + " runs 128-key tiles with e4m3 P and V only (tiles.block_k 64 for 16-bit P V)";
    if (p.q.dim > 128) return k + " runs 128-key tiles at head dims 64 and 128 (d = 256: tiles.block_k 64)";
  }
  if (p_e4m3 && v_e4m3) {
    if (!f.e4m3_pv(r.pv_acc, r.tiles.block_k)) return f.e4m3_need;
    if (prepared) {
      if (!qk_int8) return "with rotation or K smoothing " + k + " takes int8 Q/K from the preparation kernels";
      return prepare_not_covered(r, p.q.dim);
    }
    return "";
  }
  if (prepared) return "with rotation or K smoothing " + k + " takes int8 Q/K with e4m3 P and V only";
  if (rounded_to(r.p, FormatId::fp16) && rounded_to(r.v, FormatId::fp16)) {
    if (qk_bf16) return "PV in fp16 after bf16 QK^T: " + k + " pairs bf16 QK^T with bf16 or e4m3 PV";
    if (!f.fp16_pv(r.pv_acc)) return f.fp16_need + factor_emin_hint(r.pv_acc);
    return "";
  }
  if (f.bf16_pv && rounded_to(r.p, FormatId::bf16) && rounded_to(r.v, FormatId::bf16)) {
    if (qk_fp16) return "PV in bf16 after fp16 QK^T: " + k + " pairs bf16 PV with int8 or bf16 QK^T";
    if (!f.bf16_pv(r.pv_acc)) return f.bf16_need + factor_emin_hint(r.pv_acc);
    return "";
  }
  return "PV: " + k + " takes e4m3 P (static multiplier) with e4m3 V (rounded, or tensor/head/channel fp32 scales), or fp16 P and V" +
         (f.bf16_pv ? ", or bf16 P and V" : "");
}

}  // namespace
#endif

std::string mma_not_covered(const Problem& p, const Recipe& r) {
#if !defined(QATTN_WITH_CUDA)
  (void)p;
  (void)r;
  return "the mma family is built only for CUDA";
#else
  return matrix_not_covered(p, r, kMmaFamily);
#endif
}

std::string wgmma_not_covered(const Problem& p, const Recipe& r) {
#if !defined(QATTN_WITH_CUDA)
  (void)p;
  (void)r;
  return "the wgmma family is built only for CUDA (sm_90a)";
#else
  return matrix_not_covered(p, r, kWgmmaFamily);
#endif
}

WgmmaPvAcc wgmma_pv_acc(const Recipe& r) { return r.pv_acc.flush_every > 0 ? WgmmaPvAcc::per_tile : WgmmaPvAcc::into_o; }

std::string integer_not_covered(const Problem& p, const Recipe& r) {
  // validate(r) holds the rest: int8 Q, K, V with tensor or head scales, P int8/127, exact sums.
  if (r.softmax == SoftmaxKind::float_online) return "the integer family runs QFlash's and I-ViT's integer softmaxes only";
  return wave_shape_not_covered(p.q.dim, r.tiles.block_k, r.softmax == SoftmaxKind::qflash_integer);
}

IntegerInputs make_integer_inputs(const Problem& p, const Recipe& r) {
  IntegerInputs in;
  in.softmax = r.softmax == SoftmaxKind::qflash_integer ? IntegerSoftmax::qflash : IntegerSoftmax::shiftmax;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  // Codes, and the one scale of each head (tensor or head granularity), from the emulator's quantizers.
  const auto operand = [](const TensorF& t, const OperandQuant& o, std::vector<std::int8_t>& codes, std::vector<float>& scales) {
    const QuantizedTensor qt = quantize(t, o.spec);
    codes = signed_codes(qt, o.spec.format);
    for (int h = 0; h < t.heads; ++h) scales.push_back(qt.scales[qt.scale_index(h, 0, 0)]);
  };
  operand(p.q, r.q, in.q_codes, in.q_scales);
  operand(p.k, r.k, in.k_codes, in.k_scales);
  operand(p.v, r.v, in.v_codes, in.v_scales);
  // The kernel forms I0 from these scales as the emulator does: refuse the rows it cannot represent.
  for (int h = 0; h < p.q.heads; ++h) {
    const double s = static_cast<double>(in.q_scales[h]) * in.k_scales[h / p.group()] * p.scale();
    check_integer_softmax_step(in.softmax == IntegerSoftmax::qflash ? s * qflash::kLog2e : s,
                               in.softmax == IntegerSoftmax::qflash ? "qflash" : "shiftmax");
  }
  in.rows = p.rows.resolve(p.q.tokens);
  in.causal = p.causal;
  in.window = p.window;
  in.softmax_scale = p.scale();
  in.block_k = r.tiles.block_k;
  return in;
}

namespace {

// Runs a covered recipe on one family: fills `out` ([Hq, rows, d]) and returns the kernel that ran.
using FamilyRun = const char* (*)(const Problem& p, const Recipe& r, std::vector<float>& out);

// One kernel family as dispatch sees it. not_covered() and run() both walk kFamilies, in its order.
struct Family {
  GpuFamily id;                                               // its column in the knob table
  const char* name;                                           // in not_covered()'s message
  std::string (*not_covered)(const Problem&, const Recipe&);  // "" when the family takes the recipe's values
  FamilyRun run;                                              // null: not built here (not_covered says so)
};

#if defined(QATTN_WITH_CUDA)
const char* run_mma(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = needs_preparation(r) ? flash_mma_prepared(p, r) : flash_mma(make_mma_inputs(p, r));
  return kMmaKernelName;
}

const char* run_wgmma(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_wgmma(make_mma_inputs(p, r), wgmma_pv_acc(r));
  return kWgmmaKernelName;
}
#endif

const char* run_decode(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_decode(make_decode_inputs(p, r));  // one row per head: [Hq][1][d]
  return kDecodeKernelName;
}

const char* run_integer(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_integer(make_integer_inputs(p, r));
  return kIntegerKernelName;
}

const char* run_dot4(const Problem& p, const Recipe& r, std::vector<float>& out) {
  const Dot4Inputs in = make_inputs(p, r);
  out = needs_preparation(r) ? flash_dot4_prepared(p, r, in) : flash_dot4(in);
  return in.qk == Dot4Qk::integer ? kDot4KernelName : kDot4FloatKernelName;
}

// The families, first choice first. The NVIDIA-only ones (mma, wgmma) are rows in every build, so
// that not_covered() names them, but run only in the CUDA build. run() takes the first row whose
// not_covered is empty; the last row (dot4) is its fallback and is run without asking (callers ask
// not_covered() first). The fast decode path is for speed and is not dispatched.
#if defined(QATTN_WITH_CUDA)
constexpr FamilyRun kRunMma = run_mma, kRunWgmma = run_wgmma;
#else
constexpr FamilyRun kRunMma = nullptr, kRunWgmma = nullptr;
#endif
constexpr Family kFamilies[] = {
    {GpuFamily::mma, kMmaKernelName, mma_not_covered, kRunMma},
    {GpuFamily::wgmma, kWgmmaKernelName, wgmma_not_covered, kRunWgmma},
    {GpuFamily::decode, kDecodeKernelName, decode_not_covered, run_decode},
    {GpuFamily::integer, kIntegerKernelName, integer_not_covered, run_integer},
    {GpuFamily::dot4, kDot4KernelName, dot4_not_covered, run_dot4},
};

const Family& family_row(GpuFamily id) {
  for (const Family& f : kFamilies)
    if (f.id == id) return f;
  throw std::logic_error("dispatch: no row for a GPU family");
}

// A family takes a recipe when it declares every knob the recipe moves (the knob table: refusal by
// default) and its own rule takes the values; tiles=fa3_sm90 is resolved to its tiles first.
std::string row_not_covered(const Family& f, const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  if (std::string knob = undeclared_knob(r, f.id); !knob.empty()) return knob + ": not implemented by this family (knob table)";
  // kvhead and thread scales are granularities (values of the operand knobs), not yet proven on a GPU.
  if (std::string why = quantizer_not_covered(r); !why.empty()) return why;
  return f.not_covered(p, r);
}

}  // namespace

std::string family_not_covered(GpuFamily family, const Problem& p, const Recipe& r) { return row_not_covered(family_row(family), p, r); }

std::string not_covered(const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  // A knob no family declares: said once, not once a family.
  for (const RecipeKnob& k : recipe_knobs()) {
    if (k.gpu == kNoFamily && knob_differs(k, r)) return std::string(k.name) + "=" + k.get(r) + " is emulator-only (no GPU family implements it)";
  }
  for (const auto& [o, name] : {std::pair{&r.q, "q"}, std::pair{&r.k, "k"}, std::pair{&r.p, "p"}, std::pair{&r.v, "v"}}) {
    for (const OperandModifier& m : operand_modifiers()) {
      if (m.gpu == kNoFamily && m.present(o->spec)) {
        return std::string(name) + "=" + recipe_text::operand_to_string(*o) + ": /" + m.head + " is emulator-only (no GPU family implements it)";
      }
    }
  }
  // Every family's reason, in the table's order, unless one takes the recipe.
  std::string why;
  for (const Family& f : kFamilies) {
    const std::string reason = row_not_covered(f, p, r);
    if (reason.empty()) return "";
    if (!why.empty()) why += "; ";
    why += std::string(f.name) + ": " + reason;
  }
  return why;
}

MmaInputs make_mma_inputs(const Problem& p, const Recipe& r) {
  MmaInputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  if (r.q.spec.format == FormatId::int8) {
    in.qk = QkType::int8;
    IntQK qk = int_qk(p, r);  // one group: mma_not_covered takes tensor, head or token scales
    in.q_codes = std::move(qk.q_codes);
    in.k_codes = std::move(qk.k_codes);
    in.q_scales = std::move(qk.q_scales);
    in.k_scales = std::move(qk.k_scales);
  } else {
    // bf16 values (matrix_not_covered: Q and K both bf16), or fp16, e4m3 or e5m2 values: all exact in fp16.
    in.qk = r.q.spec.format == FormatId::bf16 ? QkType::bf16 : QkType::fp16;
    in.q_values = operand_values(p.q, r.q);
    in.k_values = operand_values(p.k, r.k);
  }
  const int d = p.v.dim;
  if (r.v.spec.format == FormatId::e4m3) {
    in.pv = PvType::e4m3;
    if (r.v.unit_scale) {
      in.v_values = operand_values(p.v, r.v);  // rounded to e4m3
    } else {
      // Codes' values, with the scale (one per channel here) applied to O at the end.
      const QuantizedTensor v = quantize(p.v, r.v.spec);
      const Format e4m3 = format_of(FormatId::e4m3);
      in.v_values.resize(v.codes.size());
      for (std::size_t i = 0; i < v.codes.size(); ++i) in.v_values[i] = static_cast<float>(decode(e4m3, v.codes[i]));
      in.v_scales.resize(static_cast<std::size_t>(p.v.heads) * d);
      for (int h = 0; h < p.v.heads; ++h)
        for (int c = 0; c < d; ++c) in.v_scales[static_cast<std::size_t>(h) * d + c] = v.scales[v.scale_index(h, 0, c)];
    }
  } else {
    in.pv = r.v.spec.format == FormatId::bf16 ? PvType::bf16 : PvType::fp16;
    const Format vf = format_of(in.pv == PvType::bf16 ? FormatId::bf16 : FormatId::fp16);
    in.v_values = p.v.data;
    for (float& x : in.v_values) x = static_cast<float>(round_to(vf, x));
  }
  in.rows = p.rows.resolve(p.q.tokens);
  in.causal = p.causal;
  in.window = p.window;
  in.score_factor = static_cast<float>(p.scale()) * 1.44269504088896340736f;
  in.p_multiplier = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  in.denominator_quantized = r.denominator == Denominator::quantized_p;
  in.out = r.out;
  in.key_tile = r.tiles.block_k;
  return in;
}

GpuResult run(const Problem& p, const Recipe& recipe) {
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  for (const Family& f : kFamilies) {
    if (f.run != nullptr && row_not_covered(f, p, r).empty()) return run_family(f.id, p, r);
  }
  throw std::invalid_argument("no GPU kernel covers the recipe: " + not_covered(p, r));
}

GpuResult run_family(GpuFamily family, const Problem& p, const Recipe& recipe) {
  const Family& f = family_row(family);
  const Recipe r = tiles_for(recipe, p.q.dim, p.causal, p.window > 0);
  if (f.run == nullptr) throw std::invalid_argument(std::string(f.name) + " is not built here");
  if (const std::string why = row_not_covered(f, p, r); !why.empty()) throw std::invalid_argument(std::string(f.name) + ": " + why);
  GpuResult res;
  const int rows = static_cast<int>(p.rows.resolve(p.q.tokens).size());
  res.out = TensorF(p.q.heads, rows, p.q.dim);
  res.kernel = f.run(p, r, res.out.data);
  return res;
}

}  // namespace qattn::gpu
