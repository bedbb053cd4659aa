#pragma once
// Accumulator models: how a dot product's terms are summed into an fp32 register. The emulator
// feeds each MMA's products (one key tile of P V, or one head dim of Q K^T) through one of these.
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/recipe/recipe.hpp"

namespace qattn {

// x rounded to `mbits` explicit mantissa bits (exponent unbounded), by `mode`.
inline double round_mantissa(double x, int mbits, Rounding mode) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  const double f = std::frexp(x, &e);                 // x = f 2^e, |f| in [0.5, 1)
  const double scaled = std::ldexp(f, mbits + 1);     // integer part holds 1 + mbits bits
  const double r = mode == Rounding::toward_zero ? std::trunc(scaled) : std::nearbyint(scaled);  // default mode: ties to even
  return std::ldexp(r, e - mbits - 1);
}

// Sums terms[0..n) into acc (an fp32 register) under the model; returns the new register value.
// Terms are exact products (fp8 x fp8 and int8-valued products fit a double exactly).
class AccumulatorModel {
 public:
  explicit AccumulatorModel(const Accumulator& a) : a_(a) {}

  // exps: for fused models, each product's exponent from its factors (ilogb a + ilogb b + 1); when
  // empty the exact product's own exponent is used.
  float add(float acc, std::span<const double> terms, std::span<const int> exps = {}) const {
    switch (a_.kind) {
      case Accumulator::Kind::exact: {
        double s = 0;  // products of 8-bit operands: the double sum of <= 2^20 terms is exact
        for (double t : terms) s += t;
        return static_cast<float>(static_cast<double>(acc) + s);
      }
      case Accumulator::Kind::fp32: {
        for (double t : terms) acc = acc + static_cast<float>(t);
        return acc;
      }
      case Accumulator::Kind::fp16: {
        double r = round_to_fp16(acc);
        for (double t : terms) r = round_to_fp16(r + round_to_fp16(t));
        return static_cast<float>(r);
      }
      case Accumulator::Kind::mma: return a_.fused ? fused(acc, terms, exps) : mma(acc, terms);
    }
    return acc;
  }

 private:
  static double round_to_fp16(double x) {
    // fp16: 10 mantissa bits, saturating at 65504, subnormals below 2^-14 (quantum 2^-24).
    if (std::fabs(x) >= 65520.0) return std::copysign(65504.0, x);
    if (std::fabs(x) < 0x1p-14) return std::nearbyint(x * 0x1p24) * 0x1p-24;
    return round_mantissa(x, 10, Rounding::nearest_even);
  }

  // Per chunk: align every product to the chunk's largest exponent keeping align_bits (truncating
  // the rest, as a fixed-width adder does), sum exactly, round the chunk sum to chunk_mantissa_bits,
  // then add into the accumulator rounded to acc_mantissa_bits. With flush_every > 0 the accumulator
  // is a low-precision partial that is added into a true fp32 register every flush_every chunks.
  float mma(float acc_in, std::span<const double> terms) const {
    double fp32_reg = acc_in, partial = a_.flush_every > 0 ? 0.0 : static_cast<double>(acc_in);
    int chunks = 0;
    for (std::size_t c0 = 0; c0 < terms.size(); c0 += static_cast<std::size_t>(a_.chunk)) {
      const std::size_t c1 = std::min(terms.size(), c0 + static_cast<std::size_t>(a_.chunk));
      int emax = INT32_MIN;
      for (std::size_t i = c0; i < c1; ++i) {
        if (terms[i] == 0) continue;
        int e = 0;
        std::frexp(terms[i], &e);
        emax = std::max(emax, e);
      }
      double sum = 0;
      if (emax != INT32_MIN) {
        const double quantum = std::ldexp(1.0, emax - a_.align_bits);
        for (std::size_t i = c0; i < c1; ++i) sum += std::trunc(terms[i] / quantum) * quantum;
      }
      sum = round_mantissa(sum, a_.chunk_mantissa_bits, a_.chunk_rounding);
      partial = round_mantissa(partial + sum, a_.acc_mantissa_bits, a_.add_rounding);
      if (a_.flush_every > 0 && ++chunks % a_.flush_every == 0) {
        fp32_reg = static_cast<float>(fp32_reg + partial);
        partial = 0;
      }
    }
    if (a_.flush_every > 0) return static_cast<float>(fp32_reg + partial);
    return static_cast<float>(partial);
  }

  // A chain of MMA instructions: per chunk, the running partial and the chunk's products are aligned
  // to the largest exponent among them keeping align_bits (truncated toward zero), summed exactly, and
  // the sum is cut to chunk_mantissa_bits by chunk_rounding. Measured on the H200 for its HMMA path
  // (tests/gpu/test_mma_accumulator.cpp).
  float fused(float acc_in, std::span<const double> terms, std::span<const int> exps) const {
    double fp32_reg = acc_in, partial = a_.flush_every > 0 ? 0.0 : static_cast<double>(acc_in);
    int chunks = 0;
    for (std::size_t c0 = 0; c0 < terms.size(); c0 += static_cast<std::size_t>(a_.chunk)) {
      const std::size_t c1 = std::min(terms.size(), c0 + static_cast<std::size_t>(a_.chunk));
      int emax = INT32_MIN;
      if (partial != 0) emax = std::ilogb(partial) + 1;
      for (std::size_t i = c0; i < c1; ++i) {
        if (terms[i] == 0) continue;
        emax = std::max(emax, exps.empty() ? std::ilogb(terms[i]) + 1 : exps[i]);
      }
      if (emax != INT32_MIN) {
        // Multiples of the quantum below 2^(align_bits + 6): the double sum is exact.
        const double quantum = std::ldexp(1.0, emax - a_.align_bits);
        double sum = std::trunc(partial / quantum) * quantum;
        for (std::size_t i = c0; i < c1; ++i) sum += std::trunc(terms[i] / quantum) * quantum;
        partial = round_mantissa(sum, a_.chunk_mantissa_bits, a_.chunk_rounding);
      }
      if (a_.flush_every > 0 && ++chunks % a_.flush_every == 0) {
        fp32_reg = static_cast<float>(fp32_reg + partial);
        partial = 0;
      }
    }
    if (a_.flush_every > 0) return static_cast<float>(fp32_reg + partial);
    return static_cast<float>(partial);
  }

  Accumulator a_;
};

// The H200's matrix units as measured by tests/gpu/test_mma_accumulator.cpp (262,144 random dot
// products and 491 constructed probes, every one reproduced): on sm_90 ptxas lowers the e4m3
// mma.sync.m16n8k32 to two fp16 HMMA.16816.F32, the first from zero over the k with k % 4 in {0, 1},
// the second continuing it over k % 4 in {2, 3}; each HMMA aligns its C together with its 16
// products to the largest exponent keeping 26 bits (truncated), and cuts the sum to fp32's 23 bits
// toward zero; C of the mma.sync is then added with one fp32 add (nearest even). The flash kernel
// issues these HMMAs itself over keys 0-15 and 16-31 of each group of 32, so products enter this
// model in key order.
inline Accumulator h200_hmma_accumulator() {
  Accumulator a;
  a.kind = Accumulator::Kind::mma;
  a.fused = true;
  a.chunk = 16;
  a.align_bits = 26;
  a.chunk_mantissa_bits = 23;
  a.chunk_rounding = Rounding::toward_zero;
  return a;
}

// An e4m3 mma.sync.m16n8k32 with C kept in fp32 registers: two chained HMMAs, then one fp32 add.
inline Accumulator h200_e4m3_mma_accumulator() {
  Accumulator a = h200_hmma_accumulator();
  a.flush_every = 2;
  return a;
}


}  // namespace qattn
