#pragma once
// The recipe: everything that changes the numbers of one quantized attention evaluation. Plain data
// plus a validator and its defaults (Recipe{} is the recipe of an empty line: nothing quantized, fp32
// everywhere); its presets are in presets.hpp, its measured accumulator models in
// kernels/numerics/accumulator.hpp; its knobs (each field's name, text forms, fit moves and the GPU
// families that implement it) in knobs.hpp, which harness/io/recipe_io reads lines and JSON through.
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/formats/quantizer.hpp"

namespace qattn {

// How one operand (Q, K, P or V) is quantized. A float format with rule `none` is plain rounding to
// that format (the bf16 / fp16 baselines); fp32 with rule `none` is no quantization at all.
struct OperandQuant {
  QuantSpec spec{.format = FormatId::fp32};  // format, granularity, block, scale rule, static multiplier, scale format
  bool unit_scale = true;  // true: no scale (value rounded to the format); false: spec's scale rule
  bool operator==(const OperandQuant&) const = default;
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

// The arithmetic of the float softmax's exp2 arguments (the vendor math under FlashAttention's
// kernels, read from its softmax: the running max kept on raw scores, the exp2 argument a fused
// multiply-add, the rescale factor from the raw maxes' difference times the scale).
enum class ExpForm : std::uint8_t {
  lab,  // p = exp2(fp32(s c) - m), alpha = exp2(m_old - m_new): every product and difference rounded
  fa,   // p = exp2(fma(s, c, -fp32(m c))), alpha = exp2(fp32(fp32(m_old - m_new) c)), m on raw scores
  aten, // PyTorch's CPU flash attention in bf16 / fp16: natural exp, m on the scaled scores fp32(s scale);
        // p = fexp_u20(fp32(s scale) - m) on each whole 16-key vector of a tile, exp on the tile's last
        // keys, alpha = exp(m_old - m_new) (kernels/numerics/aten_math.hpp); exp2 is not used
};

// How the softmax's denominator l is summed across the keys of a row.
enum class RowSum : std::uint8_t {
  sequential,  // key after key, a tile's sum added into the rescaled l
  lanes,       // four partial sums, lane k taking the columns 8b + 2k and 8b + 2k + 1 of each tile in order
               // (an m16n8 / wgmma accumulator's quad), each rescaled and added onto key by key, then
               // combined by a butterfly at the end: (l0 + l2) + (l1 + l3)
  vec16,       // ATen's CPU kernel: per tile, sixteen partial sums (lane k: the keys 16b + k of the tile's
               // whole vectors), reduced by its shuffle tree (lane k with k + 8, then + 4, + 2, + 1), then
               // the tile's last keys added in order; l = fma(alpha, l, that sum)
};

// The final normalization O / l.
enum class Norm : std::uint8_t {
  div,  // O / l, correctly rounded
  rcp,  // O x fp32(1 / l): one reciprocal, then a multiply (FlashAttention's epilogue)
  sfu,  // O x rcp.approx.ftz(l): the reciprocal as the H100's special-function unit gives it (kernels/numerics/sfu_math.hpp)
};

// The float softmax's exp2: correctly rounded, or PTX ex2.approx.ftz.f32 as measured on the H100
// (what exp2f compiles to under fast math; bit-faithful for arguments <= 0, kernels/numerics/sfu_math.hpp).
enum class Exp2Math : std::uint8_t { rn, sfu };

// A matrix unit's accumulation, parameterized as hardware behaves.
struct Accumulator {
  enum class Kind : std::uint8_t {
    exact,   // int32 for integer operands (exact), float64-exact sums for float operands
    fp32,    // sequential fp32 adds, round to nearest even
    fp16,    // sequential fp16 adds, each product rounded to fp16 first
    fp16fma, // an fp16 accumulator fed by fp32 fused multiply-adds: fp16(fp32(acc + p v)), the
             // product never rounded alone (llama.cpp's CPU f16 decode, ggml_vec_mad_f16 on x86)
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
  // Fused models: a factor's exponent below this counts as this, as an adder that reads a subnormal
  // operand's exponent field does (fp16: -14, so a subnormal factor aligns like the smallest normal).
  // kTrueExponents: each factor's own floor log2.
  static constexpr int kTrueExponents = -2000;
  int factor_exponent_min = kTrueExponents;
  bool operator==(const Accumulator&) const = default;
};

// QFlash's integer softmax is specified by its paper only up to constants; implementations differ
// in them. `lab` in every field is the lab's reading (kernels/numerics/qflash.hpp); the other values
// are what QFlash's published Triton kernel does (github EfficientCompLab/qflash at 46adca5,
// qflash/kernel.py, default settings; docs/peers/qflash-46adca5.md).
struct QFlashVariant {
  // Constants: lab = I0 from s~ with the exact log2 e, rounded half up; kernel = s_Q s_K rounded to
  // fp16 (torch's half product), times softmax_scale x 1.44269504, I0 and the multipliers rounded
  // half to even (Python round).
  enum class Constants : std::uint8_t { lab, kernel } constants = Constants::lab;
  // exp2's integer part q: lab = the exact (-x) / I0; fixed16 = (x * exp_M) >> 16 in int32 with
  // exp_M = round(-s~ 2^16), the remainder unconstrained, a shift of 32 or more giving the sign.
  enum class Exp : std::uint8_t { lab, fixed16 } exp = Exp::lab;
  // P8: lab = (P * round(127 2^15 / I0)) >> 15, truncating; round16 = (P * round(s~ 127 2^16) + 2^15) >> 16,
  // rounding half up, kept to int8 with wraparound.
  enum class Requant : std::uint8_t { lab, round16 } requant = Requant::lab;
  // Rescaling by alpha: lab = (x alpha) / I0 truncating; shift30 = (x alpha round(2^30 / I0) + 2^29) >> 30 in int64.
  enum class Release : std::uint8_t { lab, shift30 } release = Release::lab;
  // Start values: lab = m = -2^21, l = 0; kernel = m = -2^20, l = 1.
  enum class Start : std::uint8_t { lab, kernel } start = Start::lab;
  // Keys past N in the last key tile: lab = skipped; pad = scored -2^20 against V = 0, their P8 summed into l.
  enum class Tail : std::uint8_t { lab, pad } tail = Tail::lab;
  // Output integer: lab = floor(O / l) (0 when l = 0); trunc32 = trunc(fp32(O) / fp32(l)) kept to int8 with
  // wraparound. (The kernel's GPU divides approximately: the last place can differ, counted by the proof.)
  enum class Division : std::uint8_t { lab, trunc32 } division = Division::lab;
  bool operator==(const QFlashVariant&) const = default;
};

struct Tiles {
  int block_q = 64;  // Br
  int block_k = 64;  // Bc
  // fa3_sm90: Br and Bc chosen per problem as FlashAttention-3's sm90 forward chooses them (its
  // tile_size_fwd_sm90: by head dim, mask and element size, 8-bit when Q's format is); resolved by
  // tiles_for() before a problem runs.
  bool fa3_sm90 = false;
  bool operator==(const Tiles&) const = default;
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
  // Splits by cache cell instead of by visible key tile: the keys a row sees, padded to a multiple of
  // split_pad cells (at least split_pad), cut into split_k equal chunks; one chunk when the padded
  // count is under split_min. llama.cpp's CPU decode splits its padded KV cache so, one chunk per
  // thread. 0: split_k equal shares of the row's visible tiles.
  int split_pad = 0, split_min = 0;
  double lazy_rescale_tau = 0; // skip rescaling while the running max grows by less than tau (log2 units); 0 = always rescale
  QFlashVariant qflash;        // softmax = qflash_integer only
  // SageAttention 1's float-path choices (sageattention 1.0.6, quant_per_block.py and
  // attn_qk_int8_per_block*.py; docs/peers/sageattention-1.0.6.md):
  FormatId k_smoothing_format = FormatId::fp32;  // K's mean rounded to, and K - mean stored in, this format (fp16: torch on an fp16 K)
  bool q_prescale = false;     // Q multiplied by fp32(softmax_scale x 1.44269504) before quantization; scores are then log2 units
  bool qk_scale_sequential = false;  // integer QK^T: (S sq) sk in two fp32 multiplies instead of S fp32(sq sk)
  bool pad_keys_zero = false;  // keys past N in the last tile score 0 (a masked load reads 0) against V = 0 (not causal)
  // int4 K kept as unsigned codes c + 8 (q4_0's storage) against int8 Q in groups: the zero point's
  // share, 8 x sK x sum(Q), taken from the sum of Q's unquantized values in the group instead of its
  // codes (ggml-cuda's vector kernel: Q in q8_1, whose block carries that sum). false: exact codes.
  bool k_zero_q_sum = false;
  // Key tiles from the last visible one down to the first, as FlashAttention-3's mainloop iterates
  // them: P is rounded against the running max, so the order changes which max each tile sees.
  bool reverse_key_tiles = false;
  FormatId out = FormatId::fp32;  // the output as the kernel stores it: fp32, or rounded to fp16 / bf16
  ExpForm exp_form = ExpForm::lab;
  RowSum row_sum = RowSum::sequential;
  Norm norm = Norm::div;
  Exp2Math exp2 = Exp2Math::rn;
  // Field by field: knobs.cpp's coverage whitelist finds a field no knob owns by comparing with Recipe{}.
  bool operator==(const Recipe&) const = default;
};

// p / max(p) at or below which a statically scaled P is flushed to zero: P is stored as enc(p S), so
// the format's flush threshold over S (int8 at 127: 0.5/127). nullopt when P has no static scale.
std::optional<double> static_p_flush_threshold(const OperandQuant& p);

// The accumulators a recipe gets where it names none: integer Q and K sum exactly (int32, as every
// kernel does), and an integer softmax's P V too; otherwise fp32 (Accumulator{}).
void default_accumulators(Recipe& r, bool qk_given, bool pv_given);

// Throws std::invalid_argument naming the field ("p.granularity", "pv_acc.chunk", ...) and why.
// The recipe with its tiles made concrete for a problem of this head dim and mask (tiles=fa3_sm90);
// any other recipe is returned as it is.
Recipe tiles_for(const Recipe& r, int head_dim, bool causal, bool local);

// The recipe with its kvhead scales made concrete for a problem of q_heads query and kv_heads KV
// heads: Q's heads grouped by the KV head they share (q_heads / kv_heads of them), K's and V's
// heads one each. The emulator and the GPU families' host inputs quantize through it.
Recipe kv_groups_for(const Recipe& r, int q_heads, int kv_heads);

// validate(const Recipe&) is the knob table's rules, row by row (kernels/recipe/knobs.hpp).

}  // namespace qattn
