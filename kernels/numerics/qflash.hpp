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
// multiply by a precomputed reciprocal that is exact over the range it sees. Host and device
// (kernels/gpu/integer/flash_integer.cu) share these functions.
#include <cstdint>
#include <string>

#include "kernels/formats/host_device.hpp"

namespace qattn::qflash {

// log2(e) in double: s~ = s_Q s_K softmax_scale log2(e), formed the same way on host and device.
inline constexpr double kLog2e = 1.4426950408889634;

struct Constants {
  std::int64_t i0 = 1;  // integer for 1.0 in log2 units
  std::int64_t m = 0;   // requantization multiplier (shift 15)
  // The published kernel's constants (qflash.* recipe keys; kernel_constants() below):
  std::int64_t exp_m = 0;  // round(-s~ 2^16): exp2's fixed-point reciprocal of I0 (negative)
  std::int64_t req_m = 0;  // round(s~ 127 2^16): requantization multiplier (shift 16)
  std::int64_t m30 = 0;    // round(2^30 / I0): ScaleRelease multiplier (shift 30)
};

QATTN_HD inline Constants constants(double s_tilde) {
  Constants c;
  c.i0 = static_cast<std::int64_t>(1.0 / s_tilde + 0.5);
  if (c.i0 < 1) c.i0 = 1;
  c.m = static_cast<std::int64_t>(127.0 * 32768.0 / static_cast<double>(c.i0) + 0.5);
  c.exp_m = -static_cast<std::int64_t>(s_tilde * 65536.0 + 0.5);
  c.req_m = static_cast<std::int64_t>(s_tilde * 127.0 * 65536.0 + 0.5);
  c.m30 = static_cast<std::int64_t>(1073741824.0 / static_cast<double>(c.i0) + 0.5);
  return c;
}

// ---- the published kernel's integer steps (github EfficientCompLab/qflash at 46adca5) ----
// The kernel computes in int32 and relies on GPU semantics: products wrap modulo 2^32, a shift by
// 32 or more (PTX shr clamps the count) leaves only the sign, and int8 casts keep the low byte.

QATTN_HD inline std::int32_t wrap32(std::int64_t v) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(v))); }
QATTN_HD inline std::int32_t wrap8(std::int64_t v) { return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v))); }

// 2^(x s~) for x <= 0 with q = (x exp_M) >> 16 (so q ~ floor(-x / I0) from a rounded reciprocal,
// one off either way) and r = x + q I0 left wherever that puts it; value scale 1/I0.
QATTN_HD inline std::int64_t shift_exp2_fixed16(std::int64_t x, const Constants& c) {
  const std::int32_t q = wrap32(wrap32(x * c.exp_m)) >> 16;
  const std::int32_t r = wrap32(x + static_cast<std::int64_t>(q) * c.i0);
  const std::int32_t base = wrap32(static_cast<std::int64_t>(r >> 1) + c.i0);
  if (static_cast<std::uint32_t>(q) >= 32u) return base < 0 ? -1 : 0;
  return base >> q;
}

// P8 = (P req_M + 2^15) >> 16: rounds half up; the int8 store wraps (128 -> -128).
QATTN_HD inline std::int64_t requantize_round16(std::int64_t p, const Constants& c) { return wrap8(wrap32(p * c.req_m + 32768) >> 16); }

// ScaleRelease in int64 with the shift-30 reciprocal of I0, rounding half up, stored as int32.
QATTN_HD inline std::int64_t scale_release_shift30(std::int64_t x, std::int64_t alpha, const Constants& c) {
  return wrap32((x * alpha * c.m30 + (std::int64_t{1} << 29)) >> 30);
}

// 2^(x s~) for an integer x <= 0, with value scale 1/I0.
QATTN_HD inline std::int64_t shift_exp2(std::int64_t x, const Constants& c) {
  const std::int64_t neg = -x;
  const std::int64_t q = neg / c.i0;
  const std::int64_t r = -(neg - q * c.i0);  // (-I0, 0]
  const std::int64_t base = c.i0 + (r >> 1);  // (I0/2, I0]: 1 + r/(2 I0)
  return q >= 62 ? 0 : (base >> q);
}

QATTN_HD inline std::int64_t requantize(std::int64_t p, const Constants& c) { return (p * c.m) >> 15; }

QATTN_HD inline std::int64_t scale_release(std::int64_t x, std::int64_t alpha, const Constants& c) { return (x * alpha) / c.i0; }

// The output's integer: floor(O / l). The row max starts at -2^21 (Algorithm 1), above every score
// when d >= 130 and the scores are very negative: then every P8 flushes to 0 and l = 0, where the
// paper's algorithm divides by zero; the lab defines that output 0 (O is 0 too).
QATTN_HD inline std::int64_t floor_div(std::int64_t a, std::int64_t b);
QATTN_HD inline std::int64_t normalize(std::int64_t o, std::int64_t l) { return l == 0 ? 0 : floor_div(o, l); }

// Floor division for the final normalization (numerator may be negative).
QATTN_HD inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace qattn::qflash

namespace qattn::ivit {

// I-ViT's Shiftmax (Li and Gu, I-ViT), over a whole row (it predates tiling), with the lab's
// constants: scores x (int, scale S) minus the row max; x log2(e) ~ x + (x >> 1) - (x >> 4);
// I0 = floor(-1 / S) stands for -1; q = floor(xp / I0), r = xp - q I0 in (I0, 0];
// exp = ((r >> 1) - I0) << (kExpBits - q)   (2^(r S) ~ 1 + r S / 2, scaled by 2^kExpBits / S);
// P = (floor(2^kDivBits / sum exp) * exp) >> (kDivBits - kPBits): P in [0, 2^kPBits], scale 2^-kPBits.
inline constexpr int kExpBits = 15;
inline constexpr int kDivBits = 40;
inline constexpr int kPBits = 7;

QATTN_HD inline std::int64_t i0(double s) {
  const double v = -1.0 / s;
  std::int64_t f = static_cast<std::int64_t>(v);
  if (static_cast<double>(f) > v) --f;  // floor for negatives
  return f < -1 ? f : -1;
}

// x <= 0 (already minus the row max).
QATTN_HD inline std::int64_t exp(std::int64_t x, std::int64_t i0) {
  const std::int64_t xp = x + (x >> 1) - (x >> 4);
  const std::int64_t q = xp / i0;               // both <= 0: truncation is floor here
  const std::int64_t r = xp - q * i0;           // (I0, 0]
  const std::int64_t b = (r >> 1) - i0;         // (-I0/2, -I0]
  return q > kExpBits ? 0 : (b << (kExpBits - q));
}

}  // namespace qattn::ivit

namespace qattn {

// Throws NumericFailure when an integer softmax ("qflash" or "shiftmax") cannot represent the score
// unit s of a row (outside [2^-30, 2^15]; integer_softmax_range.cpp derives the range). The emulator
// and the GPU's integer family refuse the same rows. Host only.
void check_integer_softmax_step(double s, const std::string& softmax);

}  // namespace qattn
