// The dot4 family's coverage rule, its inputs from the emulator's quantizers, and its launch.
#include "kernels/gpu/common/host_operands.hpp"
#include "kernels/gpu/common/query_rows.hpp"  // the row families' shape limits
#include "kernels/gpu/dot4/flash_dot4.hpp"
#include "kernels/gpu/prepare/prepare.hpp"
#include "kernels/numerics/accumulator.hpp"  // scaled_after_qk, v_scaled_after_pv
#include "kernels/numerics/prepare_cpu.hpp"

namespace qattn::gpu {

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

namespace {

// K's mean subtracted on the host by the emulator's own code (kernels/numerics/prepare_cpu) where that
// is all the preparation a recipe asks: the host quantizer then takes K in any granularity, and the
// mean's format (ksmooth.format), which the preparation kernels do not.
bool smoothed_on_host(const Recipe& r) {
  return (r.k_smoothing == KSmoothing::global_mean || r.k_smoothing == KSmoothing::block_mean) && r.rotation == Rotation::none && !r.q_smoothing;
}

bool device_prepared(const Recipe& r) { return needs_preparation(r) && !smoothed_on_host(r); }

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
  if (device_prepared(r) && (scaled_after_qk(r, r.q) || scaled_after_qk(r, r.k))) {
    return "QK^T: prepared (smoothed or rotated) scaled float Q or K under a matrix unit's model is emulator-only";
  }
  if (device_prepared(r)) {
    const std::string why = prepare_not_covered(r, d, false);
    if (!why.empty()) return why;
    // The preparation kernels subtract K's mean in fp32; only the host's smoothing rounds it.
    if (r.k_smoothing_format != FormatId::fp32) return "ksmooth.format with rotation or Q smoothing: the preparation kernels keep K's mean in fp32";
  }
  if (!r.p.unit_scale && r.p.spec.rule != ScaleRule::static_multiplier) return "P needs a static multiplier";
  if (r.exp_form == ExpForm::aten || r.row_sum == RowSum::vec16) {
    return "ATen's CPU exponential and row sum (expform=aten, rowsum=vec16) have no GPU form";
  }
#if !defined(QATTN_WITH_CUDA)
  if (r.exp2 == Exp2Math::sfu || r.norm == Norm::sfu) return "exp2=sfu and norm=sfu model NVIDIA's special-function unit (a CUDA build)";
#endif
  // A lazy rescale lets P's exponent reach tau above 0, where the emulator's table of ex2.approx is
  // not the hardware's (kernels/numerics/sfu_math.hpp).
  if (r.exp2 == Exp2Math::sfu && r.lazy_rescale_tau > 0) return "exp2=sfu with a lazy rescale (tau > 0): exponents above 0 are not modelled";
  if (r.split_k > kMaxDot4Splits) return "split-K takes at most " + std::to_string(kMaxDot4Splits) + " splits";
  return wave_shape_not_covered(d, r.tiles.block_k, true);
}

Dot4Inputs make_inputs(const Problem& p, const Recipe& r) {
  Dot4Inputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  in.qk = integer_codes(r.q) ? Dot4Qk::integer : Dot4Qk::values;
  if (!device_prepared(r)) {  // prepared recipes get Q and K from the preparation kernels
    TensorF smoothed;
    if (smoothed_on_host(r)) {
      smoothed = p.k;
      smooth_k(smoothed, r);
    }
    const TensorF& k = smoothed_on_host(r) ? smoothed : p.k;
    if (in.qk == Dot4Qk::integer) {
      IntQK qk = int_qk(p.q, k, r);
      in.groups = qk.groups;
      in.q_codes = std::move(qk.q_codes);
      in.k_codes = std::move(qk.k_codes);
      in.q_scales = std::move(qk.q_scales);
      in.k_scales = std::move(qk.k_scales);
    } else {
      in.q_values = scaled_after_qk(r, r.q) ? operand_codes(p.q, r.q, in.q_row_scales) : operand_values(p.q, r.q);
      in.k_values = scaled_after_qk(r, r.k) ? operand_codes(k, r.k, in.k_row_scales) : operand_values(k, r.k);
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
  in.exp_form = r.exp_form;
  in.row_sum = r.row_sum;
  in.norm = r.norm;
  in.exp2 = r.exp2;
  return in;
}

const char* run_dot4(const Problem& p, const Recipe& r, std::vector<float>& out) {
  const Dot4Inputs in = make_inputs(p, r);
  out = device_prepared(r) ? flash_dot4_prepared(p, r, in) : flash_dot4(in);
  return in.qk == Dot4Qk::integer ? kDot4KernelName : kDot4FloatKernelName;
}

}  // namespace qattn::gpu
