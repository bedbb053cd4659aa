#pragma once
// The recipe: everything that changes the numbers of one quantized attention evaluation. Plain data
// plus a validator; its JSON and one-line string forms live in harness/ (recipe_io), which is the
// only layer that parses text.
#include <cstdint>
#include <string>

#include "kernels/formats/quantizer.hpp"

namespace qattn {

// How one operand (Q, K, P or V) is quantized. A float format with rule `none` is plain rounding to
// that format (the bf16 / fp16 baselines); fp32 with rule `none` is no quantization at all.
struct OperandQuant {
  QuantSpec spec;     // format, granularity, block, scale rule, static multiplier, scale format
  bool unit_scale = true;  // true: no scale (value rounded to the format); false: spec's scale rule
};

enum class KSmoothing : std::uint8_t {
  none,
  global_mean,            // one per-channel mean over all keys of the head: exact under softmax
  block_mean,             // a mean per K block, no correction: NOT exact
  block_mean_corrected,   // a mean per K block, q . mean_b added back to that block's scores: exact
  running_mean,           // decode cache: key j is shifted by the mean of keys 0..j-1 (lags one token)
};

enum class Rotation : std::uint8_t { none, hadamard };

enum class SoftmaxKind : std::uint8_t {
  float_online,    // exp2 with log2(e) folded into the scale, as kernels do
  qflash_integer,  // QFlash: ShiftExp2, int8 requantization of P, ScaleRelease
  ivit_shiftmax,   // I-ViT's shiftmax
};

// Where the softmax denominator l is summed from.
enum class Denominator : std::uint8_t {
  quantized_p,  // from the P that multiplies V: flushed mass is renormalized away
  float_p,      // from P before quantization: outputs shrink by the flushed fraction
};

enum class Rounding : std::uint8_t { nearest_even, toward_zero };

// A matrix unit's accumulation, parameterized as hardware behaves.
struct Accumulator {
  enum class Kind : std::uint8_t {
    exact,   // int32 for integer operands (exact), float64-exact sums for float operands
    fp32,    // sequential fp32 adds, round to nearest even
    fp16,    // sequential fp16 adds
    mma,     // per k-chunk: products aligned to the largest, kept to align_bits, chunk sum rounded to
             // chunk_mantissa_bits by chunk_rounding, then added into an accumulator of
             // acc_mantissa_bits by add_rounding ("fp22" on Ada/Hopper fp8: 13 mantissa bits)
  };
  Kind kind = Kind::fp32;
  int chunk = 32;                 // products per MMA k-chunk (16 or 32)
  int align_bits = 32;            // bits kept of each product after alignment to the chunk's largest
  int chunk_mantissa_bits = 23;
  Rounding chunk_rounding = Rounding::nearest_even;
  int acc_mantissa_bits = 23;
  Rounding add_rounding = Rounding::nearest_even;
  int flush_every = 0;            // two-level: add the low-precision partial into fp32 every n chunks (0 = never)
  bool fused = false;             // the running partial is aligned together with each chunk's products (one
                                  // adder per chunk, as a chain of HMMAs); a product's exponent is its factors'
                                  // (floor log2 a + floor log2 b + 1); the chunk sum is kept to chunk_mantissa_bits
};

struct Tiles {
  int block_q = 64;  // Br
  int block_k = 64;  // Bc
};

struct Recipe {
  OperandQuant q, k, p, v;
  KSmoothing k_smoothing = KSmoothing::none;
  int k_smoothing_block = 0;   // keys per mean for block_mean(_corrected); 0 = the K tile Bc
  bool q_smoothing = false;    // SageAttention2: per-Q-block mean, dS = mean_q . K^T added in fp32
  bool v_smoothing = false;    // subtract V's channel mean, add it back scaled by sum(P)/l
  Rotation rotation = Rotation::none;
  SoftmaxKind softmax = SoftmaxKind::float_online;
  Denominator denominator = Denominator::quantized_p;
  Accumulator qk_acc, pv_acc;
  Tiles tiles;
  int split_k = 1;             // key splits merged by online softmax (decode)
  double lazy_rescale_tau = 0; // skip rescaling while the running max grows by less than tau (log2 units); 0 = always rescale
};

// Throws std::invalid_argument naming the field ("p.granularity", "pv_acc.chunk", ...) and why.
void validate(const Recipe& r);

}  // namespace qattn
