#pragma once
// The one scalar converter between real numbers and format codes. Host and device share it:
// the emulator, the quantizers and the GPU kernels' reference paths all call these functions,
// and any device fast path (hardware cvt instructions) is tested bit-equal to them.
//
// encode: round to nearest, ties to even, then apply the format's overflow policy.
// decode: exact (every code of every preset is a double).
#include <cstdint>

#include "kernels/formats/format.hpp"

namespace qattn {

namespace detail {

QATTN_HD constexpr bool is_nan(double x) { return x != x; }

// Round a non-negative double below 2^52 to the nearest integer, ties to even. Adding 2^52
// leaves no fraction bits, so the hardware's (default, nearest-even) addition does the rounding;
// both operations are exact apart from that one rounding.
QATTN_HD constexpr double round_half_even_small(double r) {
  constexpr double two52 = 4503599627370496.0;
  return (r + two52) - two52;
}

// floor(log2(a)) for finite a > 0 (handles double subnormals).
QATTN_HD constexpr int floor_log2(double a) {
  const std::uint64_t b = bits_of(a);
  const int e = static_cast<int>((b >> 52) & 0x7FF);
  if (e != 0) return e - 1023;
  int k = -1075;
  for (std::uint64_t m = b & ((std::uint64_t{1} << 52) - 1); m != 0; m >>= 1) ++k;
  return k;
}

QATTN_HD constexpr std::uint32_t nan_code(const Format& f) {
  switch (f.specials) {
    case Specials::ieee: return ((1u << (f.bits - 1)) - 1u) & ~((1u << (f.man_bits - 1)) - 1u);  // quiet NaN
    case Specials::fn: return (1u << (f.bits - 1)) - 1u;                                          // 0x7F
    case Specials::fnuz: return 1u << (f.bits - 1);                                               // 0x80
    case Specials::e8m0: return 0xFFu;
    case Specials::none: return 0u;  // no NaN code: NaN encodes as +0 (inputs are validated upstream)
  }
  return 0u;
}

QATTN_HD constexpr std::uint32_t overflow_code(const Format& f, bool negative) {
  std::uint32_t mag = max_finite_magnitude_code(f);
  if (f.overflow == Overflow::to_special) {
    if (f.specials == Specials::ieee) mag += 1;  // the Inf pattern follows max finite
    else if (f.specials != Specials::none) return nan_code(f);
  }
  return negative ? (mag | sign_bit(f)) : mag;
}

QATTN_HD constexpr std::uint32_t encode_integer(const Format& f, double x) {
  if (is_nan(x)) return 0u;  // integers have no NaN; inputs are validated upstream
  const double hi = static_cast<double>((1u << (f.bits - 1)) - 1u);
  const double lo = -hi - 1.0;  // full two's-complement range; symmetric quantizers clamp to +-hi first
  const double c = x < lo ? lo : (x > hi ? hi : x);
  const double r = round_half_even_small(c < 0 ? -c : c);
  const auto n = static_cast<std::int64_t>(c < 0 ? -r : r);
  return static_cast<std::uint32_t>(n) & code_mask(f);
}

QATTN_HD constexpr std::uint32_t encode_e8m0(const Format& f, double x) {
  if (is_nan(x) || x <= 0) return 0xFFu;  // no sign and no zero: not representable
  if (x > max_finite(f)) {
    return f.overflow == Overflow::saturate ? max_finite_magnitude_code(f) : 0xFFu;
  }
  int e = floor_log2(x);
  const double r = x * pow2(-e);  // in [1, 2)
  int code = e + f.bias;
  // The boundary between 2^e and 2^(e+1) is their arithmetic midpoint 1.5 * 2^e; a tie
  // goes to the even code.
  if (r > 1.5 || (r == 1.5 && (code & 1))) ++code;
  if (code < 0) code = 0;
  if (code > 0xFE) return f.overflow == Overflow::saturate ? 0xFEu : 0xFFu;
  return static_cast<std::uint32_t>(code);
}

}  // namespace detail

// Encode a real number into the format's code (low `bits` bits of the result).
QATTN_HD constexpr std::uint32_t encode(const Format& f, double x) {
  if (f.kind == Kind::integer) return detail::encode_integer(f, x);
  if (f.specials == Specials::e8m0) return detail::encode_e8m0(f, x);
  if (detail::is_nan(x)) return detail::nan_code(f);

  const bool negative = x < 0 || (x == 0 && (bits_of(x) >> 63) != 0);
  const double a = negative ? -x : x;
  const auto sign = [&](std::uint32_t mag) -> std::uint32_t {
    if (!negative) return mag;
    if (mag == 0 && f.specials == Specials::fnuz) return 0u;  // no negative zero
    return mag | sign_bit(f);
  };
  if (a == 0) return sign(0u);
  if (a > 1.7976931348623157e308) return detail::overflow_code(f, negative);  // Inf

  // Quantum of the binade that holds a (or of the subnormal range), then round a / quantum.
  const int lo = emin(f);
  const int e = detail::floor_log2(a);
  const int ec = e > lo ? e : lo;
  const double n = detail::round_half_even_small(a * pow2(f.man_bits - ec));
  // Subnormal: the code is n itself. Normal: biased exponent above the implicit bit; a carry
  // out of the mantissa (n == 2^(m+1)) lands on the next binade's code by the same formula.
  const std::uint64_t mag = (static_cast<std::uint64_t>(ec + f.bias - 1) << f.man_bits) + static_cast<std::uint64_t>(n);
  if (mag > max_finite_magnitude_code(f)) return detail::overflow_code(f, negative);
  return sign(static_cast<std::uint32_t>(mag));
}

QATTN_HD constexpr bool is_nan_code(const Format& f, std::uint32_t code) {
  code &= code_mask(f);
  switch (f.specials) {
    case Specials::ieee: {
      const std::uint32_t mag = code & ~sign_bit(f);
      const std::uint32_t inf = max_finite_magnitude_code(f) + 1u;
      return mag > inf;
    }
    case Specials::fn: return (code & ~sign_bit(f)) == (sign_bit(f) - 1u);
    case Specials::fnuz: return code == sign_bit(f);
    case Specials::e8m0: return code == 0xFFu;
    case Specials::none: return false;
  }
  return false;
}

// Decode a code exactly. NaN codes decode to a quiet NaN, Inf codes to +-Inf.
QATTN_HD constexpr double decode(const Format& f, std::uint32_t code) {
  code &= code_mask(f);
  if (f.kind == Kind::integer) {
    const std::int64_t v = static_cast<std::int64_t>(code) -
                           ((code & sign_bit(f)) ? (std::int64_t{1} << f.bits) : 0);
    return static_cast<double>(v);
  }
  if (is_nan_code(f, code)) return double_from_bits(0x7FF8000000000000ull);
  if (f.specials == Specials::e8m0) return pow2(static_cast<int>(code) - f.bias);
  const bool negative = (code & sign_bit(f)) != 0;
  const std::uint32_t mag = code & ~sign_bit(f);
  double v;
  if (f.specials == Specials::ieee && mag == max_finite_magnitude_code(f) + 1u) {
    v = double_from_bits(0x7FF0000000000000ull);
  } else {
    const int e = static_cast<int>(mag >> f.man_bits);
    const std::uint32_t m = mag & ((1u << f.man_bits) - 1u);
    v = e == 0 ? static_cast<double>(m) * pow2(emin(f) - f.man_bits)
               : static_cast<double>((1u << f.man_bits) + m) * pow2(e - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// Round x to the nearest value of the format (encode then decode).
QATTN_HD constexpr double round_to(const Format& f, double x) { return decode(f, encode(f, x)); }

// round_to for an fp32 value and a 16-bit float format (fp16 or bf16; fp32: x itself), in a few fp32
// and integer operations: the GPU families round their stored O this way (kernels/gpu/common/
// output_format.hpp; the generic encode, inlined into each store of the wgmma family's epilogue,
// ran its build past ten minutes). Equal to
// float(round_to(f, x)) for every fp32 x but NaN (tests/formats/test_codec.cpp): ties to even,
// subnormals, a zero keeps x's sign, and |x| past the largest finite value saturates to it.
QATTN_HD inline float round_float_to(const Format& f, float x) {
  if (f.bits >= 32 || x != x) return x;
  const std::uint32_t u = __builtin_bit_cast(std::uint32_t, x), sign = u & 0x80000000u;
  const float max = static_cast<float>(max_finite(f));
  if ((u & 0x7FFFFFFFu) >= __builtin_bit_cast(std::uint32_t, max)) return __builtin_bit_cast(float, sign | __builtin_bit_cast(std::uint32_t, max));
  if (f.exp_bits == 8) {
    // bf16: fp32's exponent, 7 of its 23 mantissa bits: round the pattern at bit 16, ties to even
    // (a carry into the exponent is the next binade's value; below max, never Inf).
    const std::uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    return __builtin_bit_cast(float, r);
  }
  // fp16 (and other formats within fp32's normal range): the quantum of x's binade (or of the
  // subnormal range), q = 2^(max(e, emin) - m); adding 1.5 2^23 q moves x into a binade whose ulp is
  // q, so the fp32 add rounds x to a multiple of q, ties to even; subtracting it back is exact.
  const int e = static_cast<int>((u >> 23) & 0xFFu) - 127;
  const int emin = 1 - f.bias;
  const int k = (e > emin ? e : emin) - f.man_bits;  // log2 q: -24..5 for fp16
  const float magic = __builtin_bit_cast(float, static_cast<std::uint32_t>(k + 23 + 127) << 23) * 1.5f;
  // Two fp32 roundings (an add, then an exact subtract): nothing here contracts into a fused
  // multiply-add, and neither nvcc nor a C++ compiler reassociates floats without fast-math.
  const float r = (x + magic) - magic;
  return r == 0.0f ? __builtin_bit_cast(float, sign) : r;
}

// Quantize one value against a scale given by its reciprocal: code = encode(x * inv_scale), with
// the product formed in fp32 as a kernel forms it before its convert instruction. Symmetric:
// values are clamped to +-max finite first (int8 uses [-127, 127], int4 [-7, 7]).
QATTN_HD constexpr std::uint32_t quantize(const Format& f, float x, float inv_scale) {
  const float y = x * inv_scale;
  const double mx = max_finite(f);
  return encode(f, y > mx ? mx : (y < -mx ? -mx : static_cast<double>(y)));  // NaN passes through
}

QATTN_HD constexpr float dequantize(const Format& f, std::uint32_t code, float scale) {
  return static_cast<float>(decode(f, code)) * scale;
}

}  // namespace qattn
