#pragma once
// The exponential PyTorch's CPU flash attention (ATen's FlashAttentionKernel.cpp) uses on the
// scores of a reduced-precision (bf16 / fp16) input, one 16-float vector at a time: ATen's
// Vectorized<float>::fexp_u20, a Schraudolph-style exponential that builds the float's bits directly.
// Its steps, as ATen's public source writes them (the AVX512 form, each a rounded fp32 operation;
// fma: fused):
//   x < ln(FLT_MIN) (bits 0xc2aeac50): 0;  x > ln(FLT_MAX) (bits 0x42b17218): +inf
//   s = x * log2(e) (bits 0x3fb8aa3b);  f = s - floor(s)
//   r = fma(f, fma(f, fma(f, c3, c2), c1), c0), the correction of 2^f against 1 + f
//   bits = truncate(fma(2^23, s - r, 2^23 * 127))
// with c0..c3 = 0.00010703434948458272, 0.30354260500649682, -0.22433836478672356,
// -0.079204240219773236 (as fp32). Its error is up to 1.1e-4 relative (5.5e-5 rms over [-30, 0],
// measured in tests/numerics), about 3 % of a bf16 ulp: the kernel's P, rounded to bf16, differs
// from a correctly rounded exponential's on about one key in seventy. The keys past a tile's last
// whole vector, and the rescale factor, take std::exp (here exp_rn: glibc's expf is within 0.502
// ulp of it).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace qattn {

// ATen's constants, as fp32.
struct AtenFexpConstants {
  static constexpr float c0 = 0.00010703434948458272f, c1 = 0.30354260500649682f, c2 = -0.22433836478672356f,
                         c3 = -0.079204240219773236f;
  static constexpr std::uint32_t log2e_bits = 0x3fb8aa3b, ln_min_bits = 0xc2aeac50, ln_max_bits = 0x42b17218;
};

inline float aten_fexp_u20(float x) {
  using C = AtenFexpConstants;
  if (x < std::bit_cast<float>(C::ln_min_bits)) return 0.0f;
  if (x > std::bit_cast<float>(C::ln_max_bits)) return std::numeric_limits<float>::infinity();
  float s = x * std::bit_cast<float>(C::log2e_bits);
  const float f = s - std::floor(s);
  float r = std::fma(f, C::c3, C::c2);
  r = std::fma(f, r, C::c1);
  r = std::fma(f, r, C::c0);
  s = s - r;
  const float t = std::fma(8388608.0f, s, 8388608.0f * 127.0f);  // 2^23, 2^23 * 127: exact in fp32
  return std::bit_cast<float>(static_cast<std::int32_t>(t));      // truncation, as cvttps2dq
}

// e^x correctly rounded to fp32 (through float64; a double rounding is possible in principle and
// harmless here).
inline float exp_rn(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

}  // namespace qattn
