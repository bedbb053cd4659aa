#include "kernels/gpu/dispatch.hpp"

#include <cmath>
#include <utility>
#include <vector>

#include "kernels/emulate/accumulator.hpp"

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/flash_dot4.hpp"
#include "kernels/gpu/prepare.hpp"

namespace qattn::gpu {

std::string dot4_not_covered(const Problem& p, const Recipe& r) {
  for (const auto* o : {&r.q, &r.k}) {
    const Granularity g = o->spec.granularity;
    if (o->unit_scale || o->spec.format != FormatId::int8 || o->spec.rule != ScaleRule::dynamic_absmax ||
        !(g == Granularity::tensor || g == Granularity::head || g == Granularity::token) || o->spec.scale_format != FormatId::fp32) {
      return "QK^T: the dot4 kernel takes int8 Q and K with tensor, head or token scales in fp32";
    }
  }
  if (r.k_smoothing != KSmoothing::none || r.q_smoothing || r.v_smoothing || r.rotation != Rotation::none) {
    return "smoothing and rotation run in preparation kernels that are not written yet";
  }
  if (r.softmax != SoftmaxKind::float_online) return "integer softmaxes have no GPU kernel yet";
  if (!r.p.unit_scale && r.p.spec.rule != ScaleRule::static_multiplier) return "P needs a static multiplier";
  if (r.qk_acc.kind != Accumulator::Kind::exact || r.pv_acc.kind != Accumulator::Kind::fp32) {
    return "the dot4 kernel accumulates QK^T exactly (int32) and PV in fp32";
  }
  if (r.split_k != 1 || r.lazy_rescale_tau != 0) return "split-K and lazy rescale have no GPU kernel yet";
  if (r.tiles.block_k % 32 != 0 || r.tiles.block_k > 256) return "the key tile must be a multiple of 32, at most 256";
  if (p.q.dim % 32 != 0 || p.q.dim > 256) return "the head dim must be a multiple of 32, at most 256";
  return "";
}

namespace {

// int8 Q/K codes and one scale per (head, token), whatever the granularity, as both kernels read
// them; from the same quantizers the emulator uses.
struct Int8QK {
  std::vector<std::int8_t> q_codes, k_codes;
  std::vector<float> q_scales, k_scales;
};

Int8QK int8_qk(const Problem& p, const Recipe& r) {
  Int8QK out;
  const Format i8 = format_of(FormatId::int8);
  const auto codes = [&](const QuantizedTensor& t, std::vector<std::int8_t>& dst) {
    for (auto c : t.codes) dst.push_back(static_cast<std::int8_t>(decode(i8, c)));
  };
  const auto scales = [](const QuantizedTensor& t, int heads, int tokens, std::vector<float>& dst) {
    dst.resize(static_cast<std::size_t>(heads) * tokens);
    for (int h = 0; h < heads; ++h)
      for (int n = 0; n < tokens; ++n) dst[static_cast<std::size_t>(h) * tokens + n] = t.scales[t.scale_index(h, n, 0)];
  };
  const QuantizedTensor q = quantize(p.q, r.q.spec), k = quantize(p.k, r.k.spec);
  codes(q, out.q_codes);
  codes(k, out.k_codes);
  scales(q, p.q.heads, p.q.tokens, out.q_scales);
  scales(k, p.k.heads, p.k.tokens, out.k_scales);
  return out;
}

}  // namespace

Dot4Inputs make_inputs(const Problem& p, const Recipe& r) {
  Dot4Inputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  Int8QK qk = int8_qk(p, r);
  in.q_codes = std::move(qk.q_codes);
  in.k_codes = std::move(qk.k_codes);
  in.q_scales = std::move(qk.q_scales);
  in.k_scales = std::move(qk.k_scales);
  // V as the emulator multiplies it: rounded to its format, or quantized and dequantized.
  if (r.v.unit_scale) {
    const Format vf = format_of(r.v.spec.format);
    in.v = p.v.data;
    for (float& x : in.v) x = static_cast<float>(round_to(vf, x));
  } else {
    in.v = dequantize(quantize(p.v, r.v.spec)).data;
  }
  in.rows = p.rows.resolve(p.q.tokens);
  in.causal = p.causal;
  in.window = p.window;
  in.score_factor = static_cast<float>(p.scale()) * 1.44269504088896340736f;
  in.p_format = r.p.spec.format;
  in.p_multiplier = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  in.denominator_quantized = r.denominator == Denominator::quantized_p;
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

bool same_accumulator(const Accumulator& a, const Accumulator& b) {
  return a.kind == b.kind && a.chunk == b.chunk && a.align_bits == b.align_bits && a.chunk_mantissa_bits == b.chunk_mantissa_bits &&
         a.chunk_rounding == b.chunk_rounding && a.acc_mantissa_bits == b.acc_mantissa_bits && a.add_rounding == b.add_rounding &&
         a.flush_every == b.flush_every && a.fused == b.fused;
}

}  // namespace

std::string mma_not_covered(const Problem& p, const Recipe& r) {
#if !defined(QATTN_WITH_CUDA)
  (void)p;
  (void)r;
  return "the mma family is built only for CUDA";
#else
  const bool qk_int8 = int8_token_scaled(r.q) && int8_token_scaled(r.k);
  const bool qk_fp16 = rounded_to(r.q, FormatId::fp16) && rounded_to(r.k, FormatId::fp16);
  if (!qk_int8 && !qk_fp16) return "QK^T: the mma kernel takes int8 Q and K with tensor, head or token fp32 scales, or Q and K rounded to fp16";
  if (qk_int8 && r.qk_acc.kind != Accumulator::Kind::exact) return "QK^T in int8 accumulates exactly (int32)";
  if (qk_fp16 && !same_accumulator(r.qk_acc, h200_hmma_accumulator())) {
    return "QK^T in fp16 accumulates as the H200's HMMA does: qk_acc must be h200_hmma";
  }
  if (r.q_smoothing || r.v_smoothing) return "Q and V smoothing have no GPU kernel yet";
  if (r.k_smoothing == KSmoothing::block_mean_corrected) return "the q . mean correction of block means has no GPU kernel yet";
  if (r.softmax != SoftmaxKind::float_online) return "integer softmaxes have no GPU kernel yet";
  if (r.split_k != 1 || r.lazy_rescale_tau != 0) return "split-K and lazy rescale have no mma kernel";
  if (r.tiles.block_k != kMmaKeyTile) return "the mma kernel's key tile is 64 (tiles.block_k)";
  if (p.q.dim != 64 && p.q.dim != 128 && p.q.dim != 256) return "the mma kernel takes head dims 64, 128 and 256";
  const bool p_e4m3 = !r.p.unit_scale && r.p.spec.format == FormatId::e4m3 && r.p.spec.rule == ScaleRule::static_multiplier;
  const Granularity vg = r.v.spec.granularity;
  const bool v_e4m3 = rounded_to(r.v, FormatId::e4m3) ||
                      (!r.v.unit_scale && r.v.spec.format == FormatId::e4m3 && r.v.spec.rule == ScaleRule::dynamic_absmax &&
                       (vg == Granularity::tensor || vg == Granularity::head || vg == Granularity::channel) &&
                       r.v.spec.scale_format == FormatId::fp32);
  const bool prepared = r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none;
  if (p_e4m3 && v_e4m3) {
    if (!same_accumulator(r.pv_acc, h200_e4m3_mma_accumulator())) {
      return "PV in e4m3 accumulates as the H200's mma.sync does: pv_acc must be h200_e4m3_mma";
    }
    if (prepared) {
      if (!qk_int8) return "rotation and K smoothing run in the preparation kernels, which feed int8 Q/K only";
      return prepare_not_covered(r, p.q.dim);
    }
    return "";
  }
  if (prepared) return "rotation and K smoothing run in the preparation kernels, which feed int8 Q/K with e4m3 P and V only";
  if (rounded_to(r.p, FormatId::fp16) && rounded_to(r.v, FormatId::fp16)) {
    if (!same_accumulator(r.pv_acc, h200_hmma_accumulator())) return "PV in fp16 accumulates as the H200's HMMA does: pv_acc must be h200_hmma";
    return "";
  }
  return "PV: the mma kernel takes e4m3 P (static multiplier) with e4m3 V (rounded, or tensor/head/channel fp32 scales), or fp16 P and V";
#endif
}

std::string not_covered(const Problem& p, const Recipe& r) {
  const std::string mma = mma_not_covered(p, r);
  if (mma.empty()) return "";
  const std::string decode = decode_not_covered(p, r);
  if (decode.empty()) return "";
  const std::string dot4 = dot4_not_covered(p, r);
  if (dot4.empty()) return "";
  return std::string(kMmaKernelName) + ": " + mma + "; " + kDecodeKernelName + ": " + decode + "; " + kDot4KernelName + ": " + dot4;
}

MmaInputs make_mma_inputs(const Problem& p, const Recipe& r) {
  MmaInputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  if (r.q.spec.format == FormatId::int8) {
    in.qk = QkType::int8;
    Int8QK qk = int8_qk(p, r);
    in.q_codes = std::move(qk.q_codes);
    in.k_codes = std::move(qk.k_codes);
    in.q_scales = std::move(qk.q_scales);
    in.k_scales = std::move(qk.k_scales);
  } else {
    in.qk = QkType::fp16;
    const Format f16 = format_of(FormatId::fp16);
    in.q_values = p.q.data;
    in.k_values = p.k.data;
    for (float& x : in.q_values) x = static_cast<float>(round_to(f16, x));
    for (float& x : in.k_values) x = static_cast<float>(round_to(f16, x));
  }
  const int d = p.v.dim;
  if (r.v.spec.format == FormatId::e4m3) {
    in.pv = PvType::e4m3;
    if (r.v.unit_scale) {
      const Format e4m3 = format_of(FormatId::e4m3);
      in.v_values = p.v.data;
      for (float& x : in.v_values) x = static_cast<float>(round_to(e4m3, x));
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
    in.pv = PvType::fp16;
    const Format f16 = format_of(FormatId::fp16);
    in.v_values = p.v.data;
    for (float& x : in.v_values) x = static_cast<float>(round_to(f16, x));
  }
  in.rows = p.rows.resolve(p.q.tokens);
  in.causal = p.causal;
  in.window = p.window;
  in.score_factor = static_cast<float>(p.scale()) * 1.44269504088896340736f;
  in.p_multiplier = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  in.denominator_quantized = r.denominator == Denominator::quantized_p;
  return in;
}

GpuResult run(const Problem& p, const Recipe& r) {
  GpuResult res;
  const int rows = static_cast<int>(p.rows.resolve(p.q.tokens).size());
  res.out = TensorF(p.q.heads, rows, p.q.dim);
#if defined(QATTN_WITH_CUDA)
  if (mma_not_covered(p, r).empty()) {
    const bool prepared = r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none;
    res.out.data = prepared ? flash_mma_prepared(p, r) : flash_mma(make_mma_inputs(p, r));
    res.kernel = kMmaKernelName;
    return res;
  }
#endif
  if (decode_not_covered(p, r).empty()) {
    res.out.data = flash_decode(make_decode_inputs(p, r));  // one row per head: [Hq][1][d]
    res.kernel = kDecodeKernelName;
    return res;
  }
  res.out.data = flash_dot4(make_inputs(p, r));
  res.kernel = kDot4KernelName;
  return res;
}

}  // namespace qattn::gpu
