#pragma once
// QFlash's integer-only online softmax (Kim et al., QFlash; shift-exp from I-ViT), as the lab
// implements it. Every quantity inside the loop is an integer; scales appear only in constants
// precomputed outside the kernel. The paper leaves its appendix constants unstated, so the lab's
// choices are written here:
//   s~     = s_Q s_K softmax_scale log2(e)        score units per log2 unit, inverted:
//   I0     = round(1 / s~)                        the integer that stands for 1.0 in log2 units
//   ShiftExp2(x <= 0) = (I0 + (r >> 1)) >> q      with -x = q I0 + r', r = -r' in (-I0, 0]:
//                                                 2^(q + r/I0) ~ 2^-q (1 + r/(2 I0)), value scale 1/I0
//   Requantization P8 = (P * M) >> 15, M = round(127 * 2^15 / I0): P <= 1 maps onto [0, 127]
//   ScaleRelease(x, a) = (x * a) / I0             rescale by alpha (truncating toward zero)
//   out    = floor(O / l)                         int8-range output with the scale of V
// The row max starts at -2^21 (Algorithm 1). q is an exact integer division; a GPU kernel uses a
// multiply by a precomputed reciprocal that is exact over the range it sees.
#include <cstdint>

namespace qattn::qflash {

struct Constants {
  std::int64_t i0 = 1;  // integer for 1.0 in log2 units
  std::int64_t m = 0;   // requantization multiplier (shift 15)
};

inline Constants constants(double s_tilde) {
  Constants c;
  c.i0 = static_cast<std::int64_t>(1.0 / s_tilde + 0.5);
  if (c.i0 < 1) c.i0 = 1;
  c.m = static_cast<std::int64_t>(127.0 * 32768.0 / static_cast<double>(c.i0) + 0.5);
  return c;
}

// 2^(x s~) for an integer x <= 0, with value scale 1/I0.
inline std::int64_t shift_exp2(std::int64_t x, const Constants& c) {
  const std::int64_t neg = -x;
  const std::int64_t q = neg / c.i0;
  const std::int64_t r = -(neg - q * c.i0);  // (-I0, 0]
  const std::int64_t base = c.i0 + (r >> 1);  // (I0/2, I0]: 1 + r/(2 I0)
  return q >= 62 ? 0 : (base >> q);
}

inline std::int64_t requantize(std::int64_t p, const Constants& c) { return (p * c.m) >> 15; }

inline std::int64_t scale_release(std::int64_t x, std::int64_t alpha, const Constants& c) { return (x * alpha) / c.i0; }

// Floor division for the final normalization (numerator may be negative).
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace qattn::qflash
