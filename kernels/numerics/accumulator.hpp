#pragma once
// Accumulator models: how a dot product's terms are summed into an fp32 register. The emulator
// feeds each MMA's products (one key tile of P V, or one head dim of Q K^T) through one of these.
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/formats/format.hpp"
#include "kernels/formats/host_device.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn {

// The math the models need, on the host (std::) and on a GPU (CUDA's and HIP's global functions).
namespace accmath {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
QATTN_HD inline double frexp(double x, int* e) { return ::frexp(x, e); }
QATTN_HD inline double ldexp(double x, int e) { return ::ldexp(x, e); }
QATTN_HD inline double trunc(double x) { return ::trunc(x); }
QATTN_HD inline double rint(double x) { return ::rint(x); }
QATTN_HD inline int ilogb(double x) { return ::ilogb(x); }
QATTN_HD inline bool isfinite(double x) { return ::isfinite(x); }
#else
inline double frexp(double x, int* e) { return std::frexp(x, e); }
inline double ldexp(double x, int e) { return std::ldexp(x, e); }
inline double trunc(double x) { return std::trunc(x); }
inline double rint(double x) { return std::nearbyint(x); }  // default mode: ties to even
inline int ilogb(double x) { return std::ilogb(x); }
inline bool isfinite(double x) { return std::isfinite(x); }
#endif
}  // namespace accmath

// x rounded to `mbits` explicit mantissa bits (exponent unbounded), by `mode`.
QATTN_HD inline double round_mantissa(double x, int mbits, Rounding mode) {
  if (x == 0 || !accmath::isfinite(x)) return x;
  int e = 0;
  const double f = accmath::frexp(x, &e);              // x = f 2^e, |f| in [0.5, 1)
  const double scaled = accmath::ldexp(f, mbits + 1);  // integer part holds 1 + mbits bits
  const double r = mode == Rounding::toward_zero ? accmath::trunc(scaled) : accmath::rint(scaled);
  return accmath::ldexp(r, e - mbits - 1);
}

// fp16 rounding of a double: 10 mantissa bits, saturating at 65504, subnormals below 2^-14
// (quantum 2^-24).
QATTN_HD inline double round_to_fp16_value(double x) {
  if (x >= 65520.0 || x <= -65520.0) return x < 0 ? -65504.0 : 65504.0;
  if (x < 0x1p-14 && x > -0x1p-14) return accmath::rint(x * 0x1p24) * 0x1p-24;
  return round_mantissa(x, 10, Rounding::nearest_even);
}

// Sums n terms into acc (an fp32 register) under the model a; returns the new register value.
// term(i) is the i-th exact product (fp8 x fp8, fp16 x fp16, fp32 x fp32 and int8-valued products
// fit a double exactly); expo(i) its exponent from its factors (ilogb x + ilogb y + 1, 0 for a zero
// product), read by fused models only. One implementation for the emulator and the GPU's generic
// family (kernels/gpu/dot4/flash_dot4.cu), which computes the products on the fly.
// (nvcc: the host instantiation, with host lambdas, must not warn about its device twin.)
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename Term, typename Expo>
QATTN_HD float accumulate(const Accumulator& a, float acc_in, int n, const Term& term, const Expo& expo) {
  switch (a.kind) {
    case Accumulator::Kind::exact: {
      double s = 0;  // products of 8-bit operands: the double sum of <= 2^20 terms is exact
      for (int i = 0; i < n; ++i) s += term(i);
      return static_cast<float>(static_cast<double>(acc_in) + s);
    }
    case Accumulator::Kind::fp32: {
      float acc = acc_in;
      for (int i = 0; i < n; ++i) acc = acc + static_cast<float>(term(i));
      return acc;
    }
    case Accumulator::Kind::fp16: {
      double r = round_to_fp16_value(acc_in);
      for (int i = 0; i < n; ++i) r = round_to_fp16_value(r + round_to_fp16_value(term(i)));
      return static_cast<float>(r);
    }
    case Accumulator::Kind::fp16fma: {
      // An fp32 fused multiply-add on the widened accumulator, then the store back to fp16: two
      // roundings, as x86's FMA then F16C conversion do. r + term is exact in float64 unless their
      // exponents are over 18 bits apart (an fp16 value and an fp32 x fp16 product), where fp32's
      // rounding of it is the same.
      double r = round_to_fp16_value(acc_in);
      for (int i = 0; i < n; ++i) r = round_to_fp16_value(static_cast<double>(static_cast<float>(r + term(i))));
      return static_cast<float>(r);
    }
    case Accumulator::Kind::mma: break;
  }
  // Per chunk of a.chunk terms: unfused, the products are aligned to the chunk's largest (keeping
  // align_bits, truncating the rest, as a fixed-width adder does), summed exactly, the sum rounded
  // to chunk_mantissa_bits, then added into an accumulator of acc_mantissa_bits. Fused (a chain of
  // MMA instructions), the running partial joins its chunk's alignment and the sum is cut to
  // chunk_mantissa_bits. With flush_every > 0 the partial is added into a true fp32 register every
  // flush_every chunks.
  if (!accmath::isfinite(acc_in)) {  // an earlier Inf or NaN stays (nothing to align to)
    double s = acc_in;
    for (int u = 0; u < n; ++u) s += term(u);
    return static_cast<float>(s);
  }
  double fp32_reg = acc_in, partial = a.flush_every > 0 ? 0.0 : static_cast<double>(acc_in);
  int chunks = 0;
  for (int c0 = 0; c0 < n; c0 += a.chunk) {
    const int c1 = c0 + a.chunk < n ? c0 + a.chunk : n;
    int emax = INT32_MIN;
    if (a.fused && partial != 0 && accmath::isfinite(partial)) emax = accmath::ilogb(partial) + 1;
    for (int i = c0; i < c1; ++i) {
      const double t = term(i);
      if (t == 0) continue;
      if (!accmath::isfinite(t)) {
        // An Inf or NaN product has no exponent to align to; the register ends non-finite as IEEE
        // addition leaves it (the caller reports such an output, never prints it as a result).
        double s = acc_in;
        for (int u = 0; u < n; ++u) s += term(u);
        return static_cast<float>(s);
      }
      int e = 0;
      if (a.fused) {
        e = expo(i);
      } else {
        accmath::frexp(t, &e);
      }
      emax = e > emax ? e : emax;
    }
    if (a.fused) {
      if (emax != INT32_MIN) {
        // Multiples of the quantum below 2^(align_bits + 6): the double sum is exact.
        const double quantum = accmath::ldexp(1.0, emax - a.align_bits);
        double sum = accmath::trunc(partial / quantum) * quantum;
        for (int i = c0; i < c1; ++i) sum += accmath::trunc(term(i) / quantum) * quantum;
        partial = round_mantissa(sum, a.chunk_mantissa_bits, a.chunk_rounding);
      }
    } else {
      double sum = 0;
      if (emax != INT32_MIN) {
        const double quantum = accmath::ldexp(1.0, emax - a.align_bits);
        for (int i = c0; i < c1; ++i) sum += accmath::trunc(term(i) / quantum) * quantum;
      }
      sum = round_mantissa(sum, a.chunk_mantissa_bits, a.chunk_rounding);
      partial = round_mantissa(partial + sum, a.acc_mantissa_bits, a.add_rounding);
    }
    if (a.flush_every > 0 && ++chunks % a.flush_every == 0) {
      fp32_reg = static_cast<float>(fp32_reg + partial);
      partial = 0;
    }
  }
  if (a.flush_every > 0) return static_cast<float>(fp32_reg + partial);
  return static_cast<float>(partial);
}

// A product's exponent from its factors, as a fused MMA adder aligns it: E = ilogb x + ilogb y + 1
// (|x y| < 2^(E + 1)), each ilogb raised to at least `emin` (Accumulator::factor_exponent_min: the
// exponent field of a subnormal operand); 0 for zero products (which never set the max).
// Non-finite factors give 0 too: accumulate() sees their non-finite product and aligns nothing.
QATTN_HD inline int factor_exponent(double x, double y, int emin = Accumulator::kTrueExponents) {
  if (x == 0 || y == 0 || !accmath::isfinite(x) || !accmath::isfinite(y)) return 0;
  const int ex = accmath::ilogb(x), ey = accmath::ilogb(y);
  return (ex > emin ? ex : emin) + (ey > emin ? ey : emin) + 1;
}

// Whether P V multiplies V's codes and applies V's scale to O at the end (O x scale, then / l):
// under a matrix unit's model (Kind::mma) the instruction sees codes, so a float V whose scale is
// the same along the keys (tensor, head, kvhead: V's heads are the KV heads, channel) is scaled after the sum, as every kernel that feeds
// an MMA does. The fused models' alignment sees those products (with the wgmma's 14 kept bits,
// scaled products would truncate elsewhere).
inline bool v_scaled_after_pv(const Recipe& r) {
  const Granularity g = r.v.spec.granularity;
  return r.pv_acc.kind == Accumulator::Kind::mma && !r.v.unit_scale && format_of(r.v.spec.format).kind == Kind::floating &&
         (g == Granularity::tensor || g == Granularity::head || g == Granularity::kvhead || g == Granularity::channel);
}

// Whether Q K^T multiplies the codes of a float Q (or K) and applies its scale to the score: under a
// matrix unit's model the instruction sees codes, so a float operand whose scale is the same along
// the head dim (tensor, head, kvhead, token, block, thread) enters the sum unscaled and the score is
// S (sq sk) in fp32, as integer Q and K always are (FlashAttention-3's fp8 descales fold into its
// softmax scale so). With the wgmma's 14 kept bits, scaled products would truncate elsewhere: on
// FlashAttention-3's fp8 outputs this moved the emulator 0.8-40 dB nearer the kernel (docs/presets.md).
inline bool scaled_after_qk(const Recipe& r, const OperandQuant& x) {
  const Granularity g = x.spec.granularity;
  return r.qk_acc.kind == Accumulator::Kind::mma && !x.unit_scale && format_of(x.spec.format).kind == Kind::floating &&
         (g == Granularity::tensor || g == Granularity::head || g == Granularity::kvhead || g == Granularity::token ||
          g == Granularity::block || g == Granularity::thread);
}

// The host's view: terms and (for fused models) exponents in arrays.
class AccumulatorModel {
 public:
  explicit AccumulatorModel(const Accumulator& a) : a_(a) {}

  // exps: for fused models, each product's exponent from its factors; when empty the exact
  // product's own exponent (ilogb + 1) is used.
  float add(float acc, std::span<const double> terms, std::span<const int> exps = {}) const {
    const auto term = [&](int i) { return terms[static_cast<std::size_t>(i)]; };
    const auto expo = [&](int i) { return exps.empty() ? accmath::ilogb(terms[static_cast<std::size_t>(i)]) + 1 : exps[static_cast<std::size_t>(i)]; };
    return accumulate(a_, acc, static_cast<int>(terms.size()), term, expo);
  }

 private:
  Accumulator a_;
};

// The H200's matrix units as measured by tests/gpu/test_mma_accumulator.cpp (262,144 random dot
// products and 491 constructed probes, every one reproduced): on sm_90 ptxas lowers the e4m3
// mma.sync.m16n8k32 to two fp16 HMMA.16816.F32, the first from zero over the k with k % 4 in {0, 1},
// the second continuing it over k % 4 in {2, 3}; each HMMA aligns its C together with its 16
// products to the largest exponent keeping 26 bits (truncated), and cuts the sum to fp32's 23 bits
// toward zero; C of the mma.sync is then added with one fp32 add (nearest even). The flash kernel
// issues these HMMAs itself over keys 0-15 and 16-31 of each group of 32, so products enter this
// model in key order. A factor's exponent is read from its fp16 exponent field: a subnormal fp16
// factor aligns as 2^-14 (measured with fp16 operands, mma.sync m16n8k16 and wgmma m64n8k16, by
// "[mma-accumulator]" / "[wgmma-accumulator]": with the factors' own exponents one dot in
// 262,144 of seed 17291838825563621729 ended 4 ulp off). e4m3 and e5m2 normals are fp16 normals.
QATTN_HD inline Accumulator h200_hmma_accumulator() {
  Accumulator a;
  a.kind = Accumulator::Kind::mma;
  a.fused = true;
  a.chunk = 16;
  a.align_bits = 26;
  a.chunk_mantissa_bits = 23;
  a.chunk_rounding = Rounding::toward_zero;
  a.factor_exponent_min = -14;
  return a;
}

// An e4m3 mma.sync.m16n8k32 with C kept in fp32 registers: two chained HMMAs, then one fp32 add.
QATTN_HD inline Accumulator h200_e4m3_mma_accumulator() {
  Accumulator a = h200_hmma_accumulator();
  a.flush_every = 2;
  return a;
}

// The H200's fp16-accumulating wgmma as Triton 3.6 issues it for SageAttention 1's P V
// (tl.dot(..., out_dtype=float16), measured: 100% of 65,536 outputs): per 16-key step C and the
// products aligned to the largest factor exponent, 26 bits kept truncating, the sum rounded to
// nearest even at fp16's 10 bits; the fp16 partial restarts every 64-key tile (four steps) and is
// added into fp32. Subnormal factors align as the HMMA's do (its 65,536-output measurement used
// the factors' own exponents; the two rules differ only where a subnormal P or V factor sets a
// step's alignment; not re-measured since).
QATTN_HD inline Accumulator h200_wgmma_f16_accumulator() {
  Accumulator a = h200_hmma_accumulator();
  a.chunk_mantissa_bits = 10;
  a.chunk_rounding = Rounding::nearest_even;
  a.flush_every = 4;
  return a;
}

// The H200's e4m3 wgmma.m64n8k32 with fp32 accumulators (the QGMMA path of FlashAttention-3 and
// SageAttention 2), as tests/gpu/test_mma_accumulator.cpp "[wgmma-accumulator]" measured it: every
// one of 262,144 random dots and 507 constructed probes, with A from shared memory and from
// registers alike. One fused adder per instruction: C joins the 32 products, all aligned to the
// largest exponent (factor exponents) keeping 14 bits below it, truncated; the sum is then cut to 13
// explicit mantissa bits toward zero. So a chain of these instructions carries its accumulator in
// 1 + 8 + 13 = 22 bits (14 significant): nothing below 2^-14 of the largest term survives, against
// fp32's 2^-24. This is the instruction itself (C = the running O, flush_every = 0).
QATTN_HD inline Accumulator h200_e4m3_wgmma_accumulator() {
  Accumulator a;
  a.kind = Accumulator::Kind::mma;
  a.fused = true;
  a.chunk = 32;
  a.align_bits = 14;
  a.chunk_mantissa_bits = 13;
  a.chunk_rounding = Rounding::toward_zero;
  return a;
}

// The same instruction per key tile: each 64-key tile's two instructions start from zero and their
// sum is added into an fp32 O (one fp32 add per tile), so the 22-bit register holds one tile, not
// the whole row (the lab's flash_wgmma in its per-tile form).
QATTN_HD inline Accumulator h200_e4m3_wgmma_tile_accumulator() {
  Accumulator a = h200_e4m3_wgmma_accumulator();
  a.flush_every = 2;
  return a;
}

// Per 128-key tile (four instructions from zero), as SageAttention 2's sm90 kernel adds its
// temporary accumulator into O (run on the H200: 8.6-11.8 dB nearer that kernel than per 64 keys).
QATTN_HD inline Accumulator h200_e4m3_wgmma_tile128_accumulator() {
  Accumulator a = h200_e4m3_wgmma_accumulator();
  a.flush_every = 4;
  return a;
}

// The H200's fp16 wgmma.m64n8k16 with fp32 accumulators: measured (262,144 random dots a run, the
// same search) to be the HMMA's model above, chunk for chunk, subnormal factors included.
QATTN_HD inline Accumulator h200_wgmma_f16_f32_accumulator() { return h200_hmma_accumulator(); }

// fp16 P V per 64-key tile (four k16 instructions from zero), added into an fp32 O.
QATTN_HD inline Accumulator h200_hmma_tile_accumulator() {
  Accumulator a = h200_hmma_accumulator();
  a.flush_every = 4;
  return a;
}

// bf16 operands on the H200's wgmma (m64n8k16.f32.bf16.bf16, and the flash family's m64nNk16): the
// fp16 instruction's model above (fused, chunk 16, 26 aligned bits truncated, the sum cut to 23
// bits toward zero) with a subnormal bf16 factor's exponent read from its exponent field as fp16's
// is: -126, bf16's smallest normal exponent. Measured by the "[wgmma-accumulator]" bf16 test
// (tests/gpu/test_mma_accumulator.cpp): every one of 262,144 random dots on two seeds, 770 and
// 794 of them aligned by a subnormal factor (the factors' own exponents missed 30 and 28).
// Straight into C (O, or a Q K^T tile from zero).
QATTN_HD inline Accumulator h200_wgmma_bf16_accumulator() {
  Accumulator a = h200_hmma_accumulator();
  a.factor_exponent_min = -126;
  return a;
}

// bf16 P V per 64-key tile (four k16 instructions from zero), added into an fp32 O.
QATTN_HD inline Accumulator h200_wgmma_bf16_tile_accumulator() {
  Accumulator a = h200_wgmma_bf16_accumulator();
  a.flush_every = 4;
  return a;
}

// Two models that sum alike (every field that the accumulation reads).
QATTN_HD inline bool same_accumulator(const Accumulator& a, const Accumulator& b) {
  return a.kind == b.kind && a.chunk == b.chunk && a.align_bits == b.align_bits && a.chunk_mantissa_bits == b.chunk_mantissa_bits &&
         a.chunk_rounding == b.chunk_rounding && a.acc_mantissa_bits == b.acc_mantissa_bits && a.add_rounding == b.add_rounding &&
         a.flush_every == b.flush_every && a.fused == b.fused && a.factor_exponent_min == b.factor_exponent_min;
}

// The measured models by the names recipes give them (acc.qk=NAME, acc.pv=NAME), in the order
// listings show them.
struct NamedAccumulator {
  const char* name;
  Accumulator (*model)();
};
inline constexpr NamedAccumulator kNamedAccumulators[] = {
    {"h200_hmma", &h200_hmma_accumulator},
    {"h200_hmma_tile", &h200_hmma_tile_accumulator},
    {"h200_e4m3_mma", &h200_e4m3_mma_accumulator},
    {"h200_e4m3_wgmma", &h200_e4m3_wgmma_accumulator},
    {"h200_e4m3_wgmma_tile", &h200_e4m3_wgmma_tile_accumulator},
    {"h200_e4m3_wgmma_tile128", &h200_e4m3_wgmma_tile128_accumulator},
    {"h200_wgmma_f16", &h200_wgmma_f16_accumulator},
    {"h200_wgmma_bf16", &h200_wgmma_bf16_accumulator},
    {"h200_wgmma_bf16_tile", &h200_wgmma_bf16_tile_accumulator},
};

}  // namespace qattn
