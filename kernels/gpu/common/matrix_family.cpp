#include "kernels/gpu/common/matrix_family.hpp"

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/common/host_operands.hpp"

namespace qattn::gpu {

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
      return f.prepared_not_covered ? f.prepared_not_covered(r, p.q.dim) : k + " has no preparation kernels (rotation, K smoothing)";
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

}  // namespace qattn::gpu
