#pragma once
// Tensor quantizers: one scale per group of elements of a [heads, tokens, dim] tensor, chosen by
// granularity, set by a dynamic absmax or a static constant, stored in a scale format.
//
// Conventions (shared with the emulator and the GPU kernels):
//   scale s  = absmax / max_finite(element format), rounded to the scale format;
//              a static rule gives the multiplier S directly (P: 127, 448, 240) and s = 1 / S;
//   code     = quantize(x, 1/s) = encode(fp32(x * fp32(1/s)))   (symmetric, saturating);
//   value    = decode(code) * s.
// A group whose absmax is zero gets s = 1 (its codes are all zero).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"
#include "kernels/formats/tensor.hpp"

namespace qattn {

enum class Granularity : std::uint8_t {
  tensor,   // one scale
  head,     // one per head
  token,    // one per (head, token)
  block,    // one per (head, block of `block` consecutive tokens)
  channel,  // one per (head, head-dim column), over all tokens
  group,    // one per (head, token, `block` consecutive head-dim elements), e.g. q8_0's 32
  kvhead,   // one per group of `block` consecutive heads: Q's heads that share a KV head (GQA), as
            // FlashAttention-3's fp8 API takes Q's descale; a recipe leaves block 0 and the emulator
            // sets it to Hq / Hkv (1 for K and V, whose heads are the KV heads)
  thread,   // one per (head, tile of `block` tokens, lane class): the tokens of a tile that one lane
            // of an MMA fragment holds share a scale, token t in class (t mod period) / width. As
            // SageAttention 2's per-thread int8 quantizer on sm90: Q rows 16 w + g and 16 w + g + 8
            // (thread:16:8:1), K keys 8 j + 2 t + {0, 1} of a 128-key tile (thread:128:8:2)
};

enum class ScaleRule : std::uint8_t { dynamic_absmax, static_multiplier };

struct QuantSpec {
  FormatId format = FormatId::int8;
  Granularity granularity = Granularity::tensor;
  int block = 0;                      // tokens per block, or elements per group
  int period = 0, width = 0;          // thread: the lane classes of a tile (block % period == 0, period % width == 0)
  ScaleRule rule = ScaleRule::dynamic_absmax;
  double multiplier = 0;              // static rule: stored value is enc(x * multiplier)
  FormatId scale_format = FormatId::fp32;
  // How a code is formed: by default encode(fp32(x * fp32(1/s))), a kernel's multiply by the
  // reciprocal; with `divide`, encode(round(fp32(x) / s)) where the quotient is first rounded to
  // quotient_format (torch dividing an fp16 tensor by an fp16 scale computes in fp32 and stores
  // fp16: QFlash quantizes that way). Host only: the GPU preparation kernels multiply.
  bool divide = false;
  FormatId quotient_format = FormatId::fp32;
  // Two more rules of kernels that quantize in their own way (SageAttention 1's Triton quantizer):
  // amax_mul: s = fp32(absmax * fp32(1 / max_finite)) instead of the correctly rounded absmax / max;
  // half_away: code = trunc(fp32(fp32(x * fp32(1/s)) + copysign(0.5, .))), ties away from zero, as an
  // fp32 add of 0.5 and a truncating convert compute it (a quotient of 0.5 - 2^-25 becomes 1); with
  // `divide`, the same from the quotient x / s (a Triton quantizer's division).
  bool amax_mul = false;
  bool half_away = false;
  // scale_eps: s = fp32(s + eps) before the scale format, as SageAttention 2's quantizers add 1e-7
  // to each absmax / 127 (it keeps an all-zero group's scale finite); 0: none.
  double scale_eps = 0;
  // ggml's quantizers. codes_fp32: codes formed with the scale in fp32, before it is rounded to the
  // scale format that is stored (q8_0 stores d in fp16 but codes x with fp32 1/d). signed_max
  // (q4_0's grid): s = m / -(max + 1) with m the group's element of largest magnitude (the first of
  // equals), sign kept, so m gets the code -(max + 1) (-8 for int4) and the others
  // min(max, floor(fp32(fp32(x / s) + max + 1.5)) - (max + 1)), rounded half up; codes from fp32 s.
  bool codes_fp32 = false;
  bool signed_max = false;
  // scale_max: the absmax maps to this value instead of the format's largest (SageAttention 2's
  // fp16-accumulating kernel maps V's to 2.25 in e4m3 so that P V cannot overflow fp16); 0: the format's.
  double scale_max = 0;
  bool operator==(const QuantSpec&) const = default;
};

// A thread tile holds at most this many tokens: past any kernel's tile (<= 256), and a mistyped
// size (thread:1000000000:...) stays an error, not an allocation of period / width scales per tile.
inline constexpr int kMaxThreadTile = 4096;

const char* name_of(Granularity g);
Granularity parse_granularity(const std::string& name, const std::string& what = "granularity");

// The spec's own rules, shape aside: its first problem as the field (block, static, amax, max, eps,
// codes, round, div, scale_format) and what was expected; none when the spec is whole. A knob that
// the spec's other choices would ignore is a problem, not a silent no-op.
struct SpecProblem {
  std::string field, why;
};
std::optional<SpecProblem> spec_problem(const QuantSpec& spec);

// Throws std::invalid_argument naming the field and what was expected (block sizes, a group that
// does not divide the head dim, a static multiplier that is not positive and finite, a scale format
// that is an integer format).
void validate(const QuantSpec& spec, int heads, int tokens, int dim);

struct QuantizedTensor {
  QuantSpec spec;
  int heads = 0, tokens = 0, dim = 0;
  std::vector<std::uint32_t> codes;  // [heads, tokens, dim]
  std::vector<float> scales;         // layout given by scale_index()
  std::size_t scale_index(int h, int n, int c) const;
};

std::size_t scale_count(const QuantSpec& spec, int heads, int tokens, int dim);

QuantizedTensor quantize(const TensorF& x, const QuantSpec& spec);
TensorF dequantize(const QuantizedTensor& q);

// The codes' own values, decode(code) without the scale, [heads, tokens, dim]: what a matrix unit
// multiplies when the scale is applied after the sum.
std::vector<float> code_values(const QuantizedTensor& q);
// The scale of each (head, token), [heads, tokens]: for a spec whose scale is constant along the
// head dim (tensor, head, kvhead, token, block, thread).
std::vector<float> token_scales(const QuantizedTensor& q);
// The scale of each (head, channel), [heads, dim]: for a spec whose scale is constant along the
// tokens (tensor, head, kvhead, channel).
std::vector<float> channel_scales(const QuantizedTensor& q);

}  // namespace qattn
