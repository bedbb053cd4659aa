#include "kernels/gpu/common/host_operands.hpp"

#include "kernels/formats/codec.hpp"
#include "kernels/numerics/prepare_cpu.hpp"

namespace qattn::gpu {

bool integer_codes(const OperandQuant& o) { return !o.unit_scale && format_of(o.spec.format).kind == Kind::integer; }

int scale_groups(const OperandQuant& o, int dim) { return o.spec.granularity == Granularity::group ? dim / o.spec.block : 1; }

bool int8_token_scaled(const OperandQuant& o) {
  const Granularity g = o.spec.granularity;
  return !o.unit_scale && o.spec.format == FormatId::int8 && o.spec.rule == ScaleRule::dynamic_absmax &&
         (g == Granularity::tensor || g == Granularity::head || g == Granularity::token) && o.spec.scale_format == FormatId::fp32;
}

bool rounded_to(const OperandQuant& o, FormatId f) { return o.unit_scale && o.spec.format == f; }

bool fp16_exact(const OperandQuant& o) {
  return rounded_to(o, FormatId::fp16) || rounded_to(o, FormatId::e4m3) || rounded_to(o, FormatId::e5m2);
}

bool needs_preparation(const Recipe& r) { return r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none || r.q_smoothing; }

std::vector<std::int8_t> signed_codes(const QuantizedTensor& t, FormatId format) {
  const Format f = format_of(format);
  std::vector<std::int8_t> out;
  out.reserve(t.codes.size());
  for (auto c : t.codes) out.push_back(static_cast<std::int8_t>(decode(f, c)));
  return out;
}

IntQK int_qk(const Problem& p, const Recipe& r) { return int_qk(p.q, p.k, r); }

IntQK int_qk(const TensorF& qf, const TensorF& kf, const Recipe& r) {
  IntQK out;
  const int d = qf.dim;
  out.groups = scale_groups(r.q, d);
  const auto scales = [&](const QuantizedTensor& t, int heads, int tokens, std::vector<float>& dst) {
    const int gs = d / out.groups;
    dst.resize(static_cast<std::size_t>(heads) * tokens * out.groups);
    for (int h = 0; h < heads; ++h)
      for (int n = 0; n < tokens; ++n)
        for (int g = 0; g < out.groups; ++g) dst[(static_cast<std::size_t>(h) * tokens + n) * out.groups + g] = t.scales[t.scale_index(h, n, g * gs)];
  };
  const QuantizedTensor q = quantize(qf, r.q.spec), k = quantize(kf, r.k.spec);
  out.q_codes = signed_codes(q, r.q.spec.format);
  out.k_codes = signed_codes(k, r.k.spec.format);
  scales(q, qf.heads, qf.tokens, out.q_scales);
  scales(k, kf.heads, kf.tokens, out.k_scales);
  return out;
}

std::vector<float> operand_values(const TensorF& t, const OperandQuant& o) {
  if (!o.unit_scale) return dequantize(quantize(t, o.spec)).data;
  const Format f = format_of(o.spec.format);
  std::vector<float> v = t.data;
  for (float& x : v) x = static_cast<float>(round_to(f, x));
  return v;
}

std::vector<float> operand_codes(const TensorF& t, const OperandQuant& o, std::vector<float>& row_scales) {
  const QuantizedTensor qt = quantize(t, o.spec);
  row_scales = token_scales(qt);
  return code_values(qt);
}

}  // namespace qattn::gpu
