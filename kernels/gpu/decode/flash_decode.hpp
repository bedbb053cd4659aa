#pragma once
// Host interface of the split-K decode kernel family: one query row per (batch, query head) against
// an int8 K cache in the packed layout of the RDNA3 DOT4 document ("packed16": int8 codes packed four
// to a 32-bit word, the scales in a separate array, one fp16 scale per block of 32 channels of each
// key) and a V cache in e4m3, q8_0 or q4_0. S = Q K^T by dot4 (int32, exact) per scale block,
// online softmax in exp2 with P quantized against the running max of its split, key tile by key tile,
// O += P V in fp32; the splits' partials (m, l, o) are merged by online softmax in a second kernel.
// The numbers are the emulator's for the corresponding recipe (RowEmulator with split_k splits).
//
// Granularity. The document's K block is a block of 32 consecutive head-dim channels of one key
// (llama.cpp's q8 block): the lab's Granularity::group with block 32 and scale_format fp16, which an
// integer QK^T pairs with the same group on Q (Q's scales stay fp32 here). One scale per key (token,
// or block/head/tensor expanded per key; the document's "packed16 + one row scale") is the same
// layout with group = d.
//
// Device layout (what a decode cache holds; pack_decode_cache() writes it from DecodeInputs):
//   capacity C = tokens rounded up to 64: every per-(batch, kv head) array has C rows, so that every
//   array and every key tile starts on a 16-byte boundary (a cache's allocation is larger than its
//   fill anyway).
//   K payload  [B][Hkv][C][d/4] uint32: channel 4w + b of a key in byte b (little endian) of word w;
//              a key's d codes are d/16 16-byte vectors, keys contiguous (coalesced 16-byte loads).
//   K scales   [B][Hkv][C][d/group] fp16 bits (fp32 when some scale is not an fp16 value), separate
//              from the payload, one per block of `group` channels of a key.
//   V codes    e4m3, q8_0: [B][Hkv][C][d] bytes (e4m3 bit patterns, int8 two's complement);
//              q4_0: [B][Hkv][C][d/2] bytes, channel 2i in the low nibble and 2i + 1 in the high
//              nibble of byte i (int4 two's complement, [-7, 7] as the lab's symmetric quantizer).
//   V scales   q8_0, q4_0: [B][Hkv][C][d/v_group] fp16 bits; e4m3: [B][Hkv][d] fp32 (one per channel,
//              or the tensor/head scale repeated).
//   Q          [B][Hq][d/4] uint32 packed as K; Q scales [B][Hq][d/group] fp32.
// Padding keys (C - N of them) are zero; nothing reads them into a result.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kDecodeKernelName = "flash_decode";

enum class DecodeV : std::uint8_t {
  e4m3,  // OCP e4m3 codes, fp32 scale per channel (or per head / tensor), or unit scale
  q8_0,  // int8 codes, one fp16 scale per v_group (32) channels of each key
  q4_0,  // int4 codes, one fp16 scale per v_group (32) channels of each key
};
const char* decode_v_name(DecodeV v);

inline constexpr int kDecodeCapacityQuantum = 64;  // C = N rounded up to this

// The kernel's inputs in logical (unpacked) form, as the lab's quantizers produce them.
struct DecodeInputs {
  int batch = 0, q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;  // dim a multiple of 32, at most 256
  int group = 0;                        // channels per Q/K scale: the group (a multiple of 16) or dim
  std::vector<std::int8_t> q_codes;     // [B][Hq][d]: the query row of each (batch, head)
  std::vector<float> q_scales;          // [B][Hq][d/group]
  std::vector<std::int8_t> k_codes;     // [B][Hkv][N][d]
  std::vector<float> k_scales;          // [B][Hkv][N][d/group]
  DecodeV v_format = DecodeV::e4m3;
  std::vector<std::uint8_t> v_codes;    // [B][Hkv][N][d]: e4m3 bits, int8, or int4 in the low nibble
  int v_group = 32;                     // q8_0 / q4_0: channels per V scale (even, divides d)
  std::vector<float> v_scales;          // e4m3: [B][Hkv][d]; q8_0 / q4_0: [B][Hkv][N][d/v_group] (fp16 values)
  std::vector<int> key_lo, key_hi;      // [B]: the query of batch entry b sees keys [lo, hi)
  float score_factor = 0;               // fp32(softmax scale) * fp32(log2 e), as the emulator
  FormatId p_format = FormatId::e4m3;
  float p_multiplier = 448;
  bool denominator_quantized = true;
  FormatId out = FormatId::fp32;        // the stored output: fp32, or O rounded to fp16 / bf16
  int block_k = 64;                     // key tile Bc (multiple of 16, at most 256): P's quantization unit
  int split_k = 1;                      // key splits (numerics: each split has its own running max)
};

// Tuning: never changes a result (a test proves it).
struct DecodeTuning {
  int threads = 256;        // threads per split block: a multiple of the wave size, at most 256
  int merge_threads = 128;  // threads per merge block: a multiple of the wave size, at most 1024
};

// Runs the split and merge kernels; returns [B][Hq][d]. Throws std::invalid_argument on unsupported
// shapes or inconsistent inputs, std::runtime_error on a CUDA/HIP error.
std::vector<float> flash_decode(const DecodeInputs& in, const DecodeTuning& tuning = {});

// Empty when the decode kernel takes the values of the knobs it declares on this problem; otherwise
// why not (the knob table refuses the knobs it does not declare: gpu::family_not_covered asks both).
std::string decode_not_covered(const Problem& p, const Recipe& r);

// The decode kernel's inputs (batch 1) for a covered recipe, from the lab's quantizers: the problem's
// single selected query row (the last token in decode) against all its visible keys.
DecodeInputs make_decode_inputs(const Problem& p, const Recipe& r);
// Its launch as dispatch's table runs it: one row per head, out [Hq][1][d].
const char* run_decode(const Problem& p, const Recipe& r, std::vector<float>& out);

// Batch entries side by side (same heads, dim and recipe fields); shorter caches are padded with
// zero codes and unit scales behind their key_hi.
DecodeInputs stack_decode_inputs(const std::vector<DecodeInputs>& parts);

// Whether P x V products are exact in fp32 for these formats and V scales, so that a fused
// multiply-add rounds exactly as the emulator's multiply-then-add (the kernel then uses fmaf).
bool decode_pv_products_exact(FormatId p_format, DecodeV v_format, const std::vector<float>& v_scales);

// ---- the device layout on the host (tests, and the upload) ----

struct PackedDecodeCache {
  int capacity = 0;
  bool k_scales_fp16 = true;
  std::vector<std::uint32_t> q;          // [B][Hq][d/4]
  std::vector<float> q_scales;           // [B][Hq][d/group]
  std::vector<std::uint32_t> k;          // [B][Hkv][C][d/4]
  std::vector<std::uint8_t> k_scales;    // [B][Hkv][C][d/group] fp16 (2 bytes) or fp32 (4 bytes), little endian
  std::vector<std::uint8_t> v;           // [B][Hkv][C][d] or [B][Hkv][C][d/2] (q4_0)
  std::vector<std::uint8_t> v_scales;    // e4m3: [B][Hkv][d] fp32; q8_0/q4_0: [B][Hkv][C][d/v_group] fp16
};
PackedDecodeCache pack_decode_cache(const DecodeInputs& in);

// Format decoders the kernels use (host and device), exact for every finite code.
// e4m3: the 7 magnitude bits placed at fp32's exponent/mantissa boundary are a float 2^-120 times
// the value (subnormals included, as fp32 subnormals); fp16 likewise with 2^-112.
QATTN_HD inline float decode_e4m3_bits(std::uint32_t code) {
  const float mag = __builtin_bit_cast(float, (code & 0x7Fu) << 20) * 0x1p120f;
  return (code & 0x80u) != 0 ? -mag : mag;
}
QATTN_HD inline float decode_fp16_bits(std::uint32_t bits) {
  const float mag = __builtin_bit_cast(float, (bits & 0x7FFFu) << 13) * 0x1p112f;
  return (bits & 0x8000u) != 0 ? -mag : mag;
}
QATTN_HD inline float decode_int4_bits(std::uint32_t nibble) {
  return static_cast<float>(static_cast<std::int32_t>(nibble << 28) >> 28);
}

// Test hooks: the device's own decoders over `codes` (FormatId e4m3, fp16, int8 or int4), and the
// device's P quantization round(x * multiplier) (the value in the multiplier's domain).
std::vector<float> device_decode_codes(FormatId f, const std::vector<std::uint32_t>& codes);
std::vector<float> device_round_p(FormatId f, float multiplier, const std::vector<float>& x);

// ---- speed ----

struct DecodeBench {
  double ms = 0;                 // median of the split + merge kernels
  double gbytes_per_s = 0;       // bytes below / ms
  double copy_gbytes_per_s = 0;  // a device-to-device copy of 2 GiB, read + write counted
  double bytes = 0;              // K codes + K scales + V codes + V scales + Q codes and scales + output;
                                 // the partials (split-K's extra traffic) are not counted
  int blocks = 0;                // split blocks launched
  int blocks_per_sm = 0;         // resident split blocks per multiprocessor (occupancy)
  bool fused_pv = false;         // whether the exact-product FMA path ran
};

// Median over `reps` runs on random device-resident inputs (never zeros) after warm-up: K int8 with
// fp16 scales per 32 channels (packed16), V as `v` (e4m3: fp32 per-channel scales; q8_0/q4_0: fp16
// per 32 channels), e4m3 P (448), key tile 64, every query at the end of its cache of `tokens` keys.
DecodeBench bench_flash_decode(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                               const DecodeTuning& tuning = {});

}  // namespace qattn::gpu
