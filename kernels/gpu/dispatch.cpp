#include "kernels/gpu/dispatch.hpp"

#include <cmath>

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/flash_dot4.hpp"

namespace qattn::gpu {

std::string not_covered(const Problem& p, const Recipe& r) {
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

Dot4Inputs make_inputs(const Problem& p, const Recipe& r) {
  Dot4Inputs in;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.q.tokens;
  in.dim = p.q.dim;
  const Format i8 = format_of(FormatId::int8);
  const QuantizedTensor q = quantize(p.q, r.q.spec), k = quantize(p.k, r.k.spec);
  for (auto c : q.codes) in.q_codes.push_back(static_cast<std::int8_t>(decode(i8, c)));
  for (auto c : k.codes) in.k_codes.push_back(static_cast<std::int8_t>(decode(i8, c)));
  // One scale per (head, token), whatever the granularity, as the kernel reads them.
  in.q_scales.resize(static_cast<std::size_t>(p.q.heads) * p.q.tokens);
  in.k_scales.resize(static_cast<std::size_t>(p.k.heads) * p.k.tokens);
  for (int h = 0; h < p.q.heads; ++h)
    for (int n = 0; n < p.q.tokens; ++n) in.q_scales[static_cast<std::size_t>(h) * p.q.tokens + n] = q.scales[q.scale_index(h, n, 0)];
  for (int h = 0; h < p.k.heads; ++h)
    for (int n = 0; n < p.k.tokens; ++n) in.k_scales[static_cast<std::size_t>(h) * p.k.tokens + n] = k.scales[k.scale_index(h, n, 0)];
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

TensorF run(const Problem& p, const Recipe& r) {
  const Dot4Inputs in = make_inputs(p, r);
  TensorF out(p.q.heads, static_cast<int>(in.rows.size()), p.q.dim);
  out.data = flash_dot4(in);
  return out;
}

}  // namespace qattn::gpu
