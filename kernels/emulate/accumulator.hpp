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

  float add(float acc, std::span<const double> terms) const {
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
      case Accumulator::Kind::mma: return mma(acc, terms);
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

  Accumulator a_;
};

// The NVIDIA H200's (sm_90a) e4m3 mma.sync.m16n8k32 with fp32 accumulators, as an mma model.
// BEST PRIOR GUESS, to be confirmed by tests/gpu/test_mma_accumulator.cpp on the H200 (its RESULT
// lines print the parameters to set here). Why this guess: for sm_90a, ptxas (CUDA 13) emits no
// native fp8 MMA for mma.sync: it unpacks the e4m3 operands to fp16 (exact), runs two
// HMMA.16816.F32 from a zero accumulator and adds C with one fp32 add (FADD, nearest even), so
// chunk 16 with flush_every 2 (partial from 0, C added in fp32 at the end); the fp32 HMMA modelled
// as published tensor-core studies describe it (products aligned to the largest with truncation,
// the sum normalized toward zero; the width is a guess). Known limits the test reports on: the two
// HMMAs take the k with k % 4 in {0, 1}, then k % 4 in {2, 3}, while this model chunks the terms in
// the order given; the second HMMA aligns its partial together with its products, while this model
// rounds the chunk sum and then adds. The often-quoted ~13-14 kept mantissa bits ("fp22") are
// reported for native fp8 MMA paths (Ada's QMMA, which sm_89 builds of the same instruction use);
// they are not this path's.
inline Accumulator hopper_e4m3_mma_accumulator() {
  Accumulator a;
  a.kind = Accumulator::Kind::mma;
  a.chunk = 16;
  a.align_bits = 25;
  a.chunk_mantissa_bits = 23;
  a.chunk_rounding = Rounding::toward_zero;
  a.acc_mantissa_bits = 23;
  a.add_rounding = Rounding::toward_zero;
  a.flush_every = 2;
  return a;
}

}  // namespace qattn
