// The integer-softmax family's coverage rule, its inputs from the emulator's quantizers, and its launch.
#include "kernels/gpu/common/host_operands.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"  // wave_shape_not_covered: one wave per row, as dot4
#include "kernels/gpu/integer/flash_integer.hpp"
#include "kernels/numerics/qflash.hpp"

namespace qattn::gpu {

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

const char* run_integer(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_integer(make_integer_inputs(p, r));
  return kIntegerKernelName;
}

}  // namespace qattn::gpu
