#pragma once
// Number formats as plain data (kind, widths, bias, special-value encoding, overflow policy),
// the presets the lab knows, and the constants derived from them. Everything here is constexpr
// and host/device so GPU kernels use exactly the emulator's definitions.
#include <cstdint>

#include "kernels/formats/host_device.hpp"

namespace qattn {

enum class Kind : std::uint8_t { integer, floating };

// How a floating format spends its codes on NaN/Inf.
enum class Specials : std::uint8_t {
  ieee,  // exponent all ones: Inf (mantissa 0) or NaN; signed zero (fp32, bf16, fp16, e5m2)
  fn,    // no Inf; only S.1111.111 is NaN; signed zero (OCP E4M3FN)
  fnuz,  // no Inf; no -0; the negative-zero pattern 0x80 is the single NaN (AMD MI300)
  none,  // every code is a finite number (OCP e2m1)
  e8m0,  // unsigned power of two, no zero; 0xFF is NaN (OCP MX scale)
};

// What happens to a finite value beyond max finite (after rounding), and to +-Inf.
enum class Overflow : std::uint8_t {
  saturate,   // clamp to +-max finite (PTX cvt.rn.satfinite); Inf inputs too
  to_special  // Inf where the format has it, else NaN (e2m1 has neither and saturates)
};

struct Format {
  Kind kind;
  int bits;      // storage width
  int exp_bits;  // 0 for integers
  int man_bits;  // explicit mantissa bits; for integers the magnitude bits (bits - 1)
  int bias;      // exponent bias; 0 for integers
  Specials specials;
  Overflow overflow;
};

enum class FormatId : std::uint8_t { fp32, bf16, fp16, e4m3, e5m2, e4m3fnuz, e5m2fnuz, e2m1, e8m0, int8, int4 };
inline constexpr int kFormatCount = 11;

QATTN_HD constexpr Format format_of(FormatId id) {
  constexpr Overflow sat = Overflow::saturate;
  switch (id) {
    case FormatId::fp32: return {Kind::floating, 32, 8, 23, 127, Specials::ieee, sat};
    case FormatId::bf16: return {Kind::floating, 16, 8, 7, 127, Specials::ieee, sat};
    case FormatId::fp16: return {Kind::floating, 16, 5, 10, 15, Specials::ieee, sat};
    case FormatId::e4m3: return {Kind::floating, 8, 4, 3, 7, Specials::fn, sat};
    case FormatId::e5m2: return {Kind::floating, 8, 5, 2, 15, Specials::ieee, sat};
    case FormatId::e4m3fnuz: return {Kind::floating, 8, 4, 3, 8, Specials::fnuz, sat};
    case FormatId::e5m2fnuz: return {Kind::floating, 8, 5, 2, 16, Specials::fnuz, sat};
    case FormatId::e2m1: return {Kind::floating, 4, 2, 1, 1, Specials::none, sat};
    case FormatId::e8m0: return {Kind::floating, 8, 8, 0, 127, Specials::e8m0, sat};
    case FormatId::int8: return {Kind::integer, 8, 0, 7, 0, Specials::none, sat};
    case FormatId::int4: return {Kind::integer, 4, 0, 3, 0, Specials::none, sat};
  }
  return {Kind::floating, 32, 8, 23, 127, Specials::ieee, sat};
}

inline constexpr const char* kFormatNames[kFormatCount] = {"fp32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz",
                                                           "e5m2fnuz", "e2m1", "e8m0", "int8", "int4"};

constexpr const char* name_of(FormatId id) { return kFormatNames[static_cast<int>(id)]; }

// ---- exact powers of two and bit casts, usable in constant expressions and device code ----

QATTN_HD constexpr std::uint64_t bits_of(double x) { return __builtin_bit_cast(std::uint64_t, x); }
QATTN_HD constexpr double double_from_bits(std::uint64_t b) { return __builtin_bit_cast(double, b); }

// 2^k exactly, for k in [-1074, 1023].
QATTN_HD constexpr double pow2(int k) {
  if (k >= -1022) return double_from_bits(static_cast<std::uint64_t>(k + 1023) << 52);
  return double_from_bits(std::uint64_t{1} << (k + 1074));
}

// ---- derived constants ----

QATTN_HD constexpr std::uint32_t code_mask(const Format& f) {
  return f.bits == 32 ? 0xFFFFFFFFu : ((1u << f.bits) - 1u);
}
QATTN_HD constexpr std::uint32_t sign_bit(const Format& f) {
  return f.specials == Specials::e8m0 ? 0u : (1u << (f.bits - 1));
}
// Smallest normal exponent (unbiased); the subnormal quantum is 2^(emin - man_bits).
QATTN_HD constexpr int emin(const Format& f) { return 1 - f.bias; }

// Largest magnitude code (sign bit clear) that is a finite number.
QATTN_HD constexpr std::uint32_t max_finite_magnitude_code(const Format& f) {
  if (f.kind == Kind::integer) return (1u << (f.bits - 1)) - 1u;
  const std::uint32_t all = (1u << (f.bits - 1)) - 1u;  // every non-sign bit set
  switch (f.specials) {
    case Specials::ieee: return all - ((1u << f.man_bits) - 1u) - 1u;  // below the Inf pattern
    case Specials::fn: return all - 1u;                                 // S.1111.111 is NaN
    case Specials::fnuz: return all;
    case Specials::none: return all;
    case Specials::e8m0: return 0xFEu;
  }
  return all;
}

QATTN_HD constexpr double max_finite(const Format& f) {
  if (f.kind == Kind::integer) return static_cast<double>(max_finite_magnitude_code(f));
  if (f.specials == Specials::e8m0) return pow2(0xFE - f.bias);
  const std::uint32_t c = max_finite_magnitude_code(f);
  const int e = static_cast<int>(c >> f.man_bits);
  const std::uint32_t m = c & ((1u << f.man_bits) - 1u);
  return static_cast<double>((1u << f.man_bits) + m) * pow2(e - f.bias - f.man_bits);
}

QATTN_HD constexpr double min_normal(const Format& f) {
  if (f.kind == Kind::integer) return 1.0;
  if (f.specials == Specials::e8m0) return pow2(-f.bias);
  return pow2(emin(f));
}

// Smallest positive value; e8m0 has no subnormals, so its smallest value is its min normal.
QATTN_HD constexpr double min_subnormal(const Format& f) {
  if (f.kind == Kind::integer) return 1.0;
  if (f.specials == Specials::e8m0) return pow2(-f.bias);
  return pow2(emin(f) - f.man_bits);
}

// Distance from 1 to the next larger value (integers: 1; e8m0: 1, since its next value is 2).
QATTN_HD constexpr double epsilon(const Format& f) {
  if (f.kind == Kind::integer) return 1.0;
  return pow2(-f.man_bits);
}

// Largest |x| that encodes to zero under round-to-nearest-even: exactly half the smallest
// positive value (the tie goes to the even code, zero). e8m0 has no zero: returns 0.
QATTN_HD constexpr double flush_threshold(const Format& f) {
  if (f.specials == Specials::e8m0) return 0.0;
  return min_subnormal(f) / 2;
}

QATTN_HD constexpr bool has_inf(const Format& f) { return f.kind == Kind::floating && f.specials == Specials::ieee; }
QATTN_HD constexpr bool has_nan(const Format& f) { return f.kind == Kind::floating && f.specials != Specials::none; }
QATTN_HD constexpr bool has_negative_zero(const Format& f) {
  return f.kind == Kind::floating && (f.specials == Specials::ieee || f.specials == Specials::fn ||
                                      f.specials == Specials::none);
}

}  // namespace qattn
