#pragma once
// A host fast path for rounding non-negative fp32 values to a format (P after the running max is
// >= 0), saturating at max finite: integer formats by nearbyint, float formats by the classic
// round-to-nearest-even on the fp32 bit pattern (add half a unit of the dropped bits, plus one if
// the kept part is odd, then clear them), subnormals by scaling with their fixed quantum.
// Bit-equal to decode(encode(f, y)) for every y >= 0 (tested on every midpoint and its neighbours).
#include <cmath>
#include <cstdint>

#include "kernels/formats/codec.hpp"

namespace qattn {

class NonNegativeRounder {
 public:
  explicit NonNegativeRounder(const Format& f)
      : integer_(f.kind == Kind::integer),
        shift_(23 - f.man_bits),
        max_(static_cast<float>(max_finite(f))),
        min_normal_(static_cast<float>(min_normal(f))),
        quantum_(static_cast<float>(min_subnormal(f))) {}

  // For formats whose values are all fp32 values (every preset but e8m0, which P never uses).
  float round(float y) const {
    if (!(y < max_)) return max_;  // saturate (NaN never reaches here: P >= 0)
    if (integer_) return std::nearbyint(y);  // default rounding mode: ties to even
    if (shift_ == 0) return y;                // fp32 itself
    if (y < min_normal_) return std::nearbyint(y / quantum_) * quantum_;  // exact scalings by 2^k
    std::uint32_t u = bit_cast_u32(y);
    u += ((1u << (shift_ - 1)) - 1u) + ((u >> shift_) & 1u);
    u &= ~((1u << shift_) - 1u);
    const float r = bit_cast_f32(u);
    return r > max_ ? max_ : r;
  }

 private:
  static std::uint32_t bit_cast_u32(float x) { return __builtin_bit_cast(std::uint32_t, x); }
  static float bit_cast_f32(std::uint32_t u) { return __builtin_bit_cast(float, u); }

  bool integer_;
  int shift_;
  float max_, min_normal_, quantum_;
};

}  // namespace qattn
