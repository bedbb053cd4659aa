#pragma once
// Preparation kernels (portable: CUDA and HIP): from raw fp32 Q, K, V on the device to what the flash
// kernels read, bit for bit what the CPU path (the emulator's prepare: kernels/numerics/prepare_cpu.hpp
// and the scalar quantizer, kernels/formats/quantizer.hpp) produces. Steps, in the emulator's order:
//   1. rotation:  Q and K rows through the orthonormal Hadamard transform (float64 butterflies in the
//                 CPU's order, then fp32(x * (1 / sqrt(d)))), in place;
//   2. smoothing: K minus its channel mean (global, per block of keys, or running), float64 sums over
//                 keys in order, mean rounded to fp32, fp32 subtraction; block means written out;
//                 Q smoothing (SageAttention2): each tile of block_q queries minus its channel mean,
//                 the same way, means written out;
//   3. Q and K:   int8 codes [H][rows][d] and one fp32 scale per (head, token) [H][rows] (tensor, head,
//                 token or block granularity, the group's scale repeated per token), dynamic absmax
//                 or static multiplier, any float scale format; or values rounded to a float format
//                 (a unit scale: bf16, fp16, e4m3, ...) [H][N][d];
//   4. V:         e4m3 codes in flash_mma's layout: Vt [Hkv][d][Np], Np = N rounded up to
//                 kMmaKeyTile (64), zero padding, the codes' e4m3 values widened to fp16 (exact), keys
//                 in order; v_scales [Hkv][d] fp32 (channel scales, or the tensor/head scale repeated;
//                 1 for a unit-scale V, which is V rounded to e4m3).
// Absmax reductions are exact in any order (max), so every result is one fixed value whatever the
// launch shape. Every function launches on the default stream and synchronizes (check_launch).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

class DeviceBuffers;  // platform.hpp (device translation units only)

inline constexpr int kMaxHadamardDim = 4096;  // one row of float64 in shared memory (32 KB)

// ---- building blocks: device pointers; throw std::runtime_error on a CUDA/HIP error ----

// x [heads][tokens][dim] in place; dim a power of two, at most kMaxHadamardDim.
void hadamard_rows(float* x, int heads, int tokens, int dim);

// k [heads][tokens][dim] in place minus the mean of each (head, channel) over all keys.
void k_global_mean(float* k, int heads, int tokens, int dim);
// The same per block of `block` consecutive keys (the last one ragged); means [heads][blocks][dim]
// (blocks = ceil(tokens / block)) receives the fp32 means when not null.
void k_block_mean(float* k, int heads, int tokens, int dim, int block, float* means);
// Key j minus fp32(mean of keys 0..j-1) (a decode cache's running mean; key 0 unchanged).
void k_running_mean(float* k, int heads, int tokens, int dim);

// Blocks of the per-block K means the recipe writes (0 unless block_mean or block_mean_corrected).
int k_mean_blocks(const Recipe& r, int tokens);
// Block size of the per-block K means (r.k_smoothing_block, or r.tiles.block_k when 0).
int k_mean_block_size(const Recipe& r);
// Dispatch on r.k_smoothing; block_means [heads][k_mean_blocks][dim] (block recipes only).
void smooth_k(float* k, int heads, int tokens, int dim, const Recipe& r, float* block_means);

// x [heads][tokens][dim] quantized per spec (format int8; granularity tensor, head, token or block):
// codes [heads][rows_out][dim] and scales [heads][rows_out] (the scale of each token's group), with
// rows_out >= tokens (0 means tokens) and rows [tokens, rows_out) zero codes and zero scales.
// Throws std::invalid_argument for another spec, std::domain_error when a scale is not
// representable in the scale format (as quantize() does).
void quantize_rows_int8(const float* x, int heads, int tokens, int dim, const QuantSpec& spec, std::int8_t* codes, float* scales,
                        int rows_out = 0);

// y = x rounded to a float format (not integer), element by element; y may be x.
void round_rows(const float* x, int heads, int tokens, int dim, FormatId format, float* y);

// v [heads][tokens][dim] to e4m3 codes in the Vt layout above: vt [heads][dim][padded_tokens(tokens)]
// fp16 bits (the code's e4m3 value, exact), v_scales [heads][dim]. vq: format e4m3 with unit_scale,
// or tensor / head / channel scales.
void quantize_v_e4m3_transposed(const float* v, int heads, int tokens, int dim, const OperandQuant& vq, std::uint16_t* vt,
                                float* v_scales);

// N rounded up to the mma key tile (Np of the Vt layout).
int padded_tokens(int tokens);

// Why the GPU's quantizers cannot form the recipe's codes and scales (the lab's rule: multiply by
// the reciprocal of absmax / max, one scale per tensor, head, token, block, group or channel), or "".
// The preparation kernels answer to it (prepare_not_covered); the families' unprepared inputs come
// from the emulator's quantizer on the host, which has every rule (the knob table declares them).
std::string quantizer_not_covered(const Recipe& r);

// Why the preparation kernels cannot produce the recipe's operands ("" when they can): Q and K int8
// (tensor, head, token or block scales) or both rounded to float formats (then with_v false), V e4m3 (unit, tensor, head or channel scales; only when
// with_v, and then no V smoothing), rotation none or hadamard (power-of-two d <= kMaxHadamardDim),
// any K smoothing, Q smoothing; quantizer_not_covered(r) first.
std::string prepare_not_covered(const Recipe& r, int dim, bool with_v = true);

struct PrepareOptions {
  bool pad_k_rows = false;  // K codes and scales with Np rows (zero rows past N), as flash_mma.cu's
                            // host path uploads K; false: N rows, as flash_mma.hpp documents
  bool with_v = true;       // false: Q and K only (vt and v_scales stay null; v may be null), for a
                            // kernel that reads V as values the host rounded (flash_dot4)
};

// What prepare_device leaves on the device: plain pointers into buffers owned by the DeviceBuffers
// passed to it (valid while it lives). Layouts as above; the fp32 tensors are what was quantized.
struct DevicePrepared {
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;
  int k_rows = 0;           // rows of k_codes / k_scales per head: tokens, or padded_tokens (pad_k_rows)
  int padded = 0;           // Np = padded_tokens(tokens): keys per (head, channel) of vt
  int k_mean_blocks = 0;    // blocks of k_block_means (0: none)
  int q_tiles = 0;                 // Q smoothing: query tiles of q_block_means (0: none)
  float* q_rot = nullptr;          // [Hq][N][d]: Q after rotation (q_float itself without Q smoothing)
  float* q_block_means = nullptr;  // [Hq][q_tiles][d], or null
  float* q_float = nullptr;        // [Hq][N][d]: Q after rotation and Q smoothing
  float* k_float = nullptr;        // [Hkv][N][d]: K after rotation and smoothing
  float* k_block_means = nullptr;  // [Hkv][k_mean_blocks][d], or null
  float* q_values = nullptr;       // float Q and K: [Hq][N][d] rounded to the format (codes stay null)
  float* k_values = nullptr;       // [Hkv][N][d]
  std::int8_t* q_codes = nullptr;  // [Hq][N][d]
  float* q_scales = nullptr;       // [Hq][N]
  std::int8_t* k_codes = nullptr;  // [Hkv][k_rows][d]
  float* k_scales = nullptr;       // [Hkv][k_rows]
  std::uint16_t* vt = nullptr;     // [Hkv][d][Np] fp16 bits
  float* v_scales = nullptr;       // [Hkv][d]
};

// From raw fp32 device tensors q [Hq][N][d], k and v [Hkv][N][d] (read, never written) to the
// prepared operands, in buffers allocated from `mem`. Throws std::invalid_argument when
// prepare_not_covered(r, dim) is not empty or a shape is invalid, std::domain_error for an
// unrepresentable scale, std::runtime_error on a CUDA/HIP error.
DevicePrepared prepare_device(const float* q, const float* k, const float* v, int q_heads, int kv_heads, int tokens, int dim,
                              const Recipe& r, DeviceBuffers& mem, const PrepareOptions& opt = {});

// Host copies of every array prepare_device produces (for tests). Same layouts and fields.
struct PreparedHost {
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0, k_rows = 0, padded = 0, k_mean_blocks = 0, q_tiles = 0;
  std::vector<float> q_rot, q_block_means, q_float, k_float, k_block_means;
  std::vector<float> q_values, k_values;  // float Q and K (codes and scales empty)
  std::vector<std::int8_t> q_codes, k_codes;
  std::vector<float> q_scales, k_scales;
  std::vector<std::uint16_t> vt;  // [Hkv][d][Np] fp16 bits
  std::vector<float> v_scales;
};

// Uploads p's raw Q, K, V, runs prepare_device and downloads everything (p's masks, rows and scale
// play no part in preparation).
PreparedHost prepare_on_device(const Problem& p, const Recipe& r, const PrepareOptions& opt = {});

}  // namespace qattn::gpu
