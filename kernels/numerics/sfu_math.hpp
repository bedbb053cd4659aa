#pragma once
// The NVIDIA special-function unit's approximate exp2 and reciprocal, as measured on an H100 (PTX
// ex2.approx.ftz.f32 and rcp.approx.ftz.f32: what exp2f and 1.0f / x become under fast math, and what
// FlashAttention's softmax runs). Each is stored as a table over one binade of inputs, as int8 ulps
// from the correctly rounded value (kernels/numerics/data, made by scripts/sfu_tables.py from the
// probe kernels/gpu/probes/sfu_probe.cu), and extended to every input by the rule the probe's sweep
// of all 2^32 inputs confirmed:
//   rcp: the mantissa's entry scaled by the exponent, for every normal input (0 misses); results
//        below 2^-126 flush to a signed zero, subnormal inputs read as zero (an infinity).
//   ex2: for x <= 0, x to fixed point with 23 fraction bits by truncation toward zero, X = n 2^23 + F
//        (0 <= F < 2^23): the entry for -2 + F 2^-23 times 2^(n + 2), results below 2^-126 flushed
//        (0 misses over every negative input). For x > 0 the hardware takes another path that the
//        table does not hold: the model gives the correctly rounded value there, which the hardware
//        returns on 61-100 % of the inputs of each binade below 2^-17 (the range a fused multiply-add's
//        rounding residual reaches) and on 69 % in [0.5, 1): not bit-faithful for x > 0.
namespace qattn {

float ex2_approx_ftz(float x);
float rcp_approx_ftz(float x);

}  // namespace qattn
