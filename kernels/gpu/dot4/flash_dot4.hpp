#pragma once
// Host interface of the generic flash-attention family (runs on any GPU: the dot4 instruction or its
// fallback, scalar fp32/fp64 arithmetic otherwise). It covers the recipes the matrix kernels do not, with the
// emulator's operations in the emulator's order:
//   S = Q K^T  integer codes (int8, int4: dot4, int32, exact) with one fp32 scale per (head, token,
//              group of channels), groups summed in fp32 as llama.cpp's blocks; or float values
//              (any float format, rounded or scaled, as the emulator multiplies them) summed by the
//              recipe's accumulator model (kernels/numerics/accumulator.hpp, shared host/device:
//              fp32, float64-exact, fp16, or an MMA unit's chunked alignment);
//              plus mean_q . k (SageAttention2's Q smoothing, from K before quantization) and
//              q . mu_b (K block means with correction, from the unquantized Q), each in fp32.
//   P          against the running max (kept while it grows by at most tau: lazy rescale),
//              through the lab's shared scalar codec (any format, a unit scale or a static
//              multiplier); the denominator summed key by key.
//   split-K    the row's key tiles in split_k splits, each from a fresh state, merged by online
//              softmax in split order (the emulator's finish()).
//   O += P V   V as values (rounded or dequantized by the host), each key tile's products summed
//              into O by the recipe's accumulator model, keys in order; with V smoothing,
//              mean_v * sum(P) added before the division.
// exp2 is the emulator's exp2_rn (kernels/formats/exp2.hpp): a float64 exp2 rounded once, or (exp2=sfu,
// CUDA) the special-function unit's ex2.approx.ftz that the emulator models; the softmax's other vendor
// math as the emulator takes it: FlashAttention's form of the exponent (expform=fa), the row sum in
// four lane partials (rowsum=lanes), and O times a reciprocal of l (norm=rcp: correctly rounded; sfu:
// rcp.approx.ftz, CUDA).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kDot4KernelName = "flash_dot4";             // integer Q K^T by dot4
inline constexpr const char* kDot4FloatKernelName = "flash_dot4/float";  // the same family, Q K^T of values

enum class Dot4Qk : std::uint8_t {
  integer,  // q_codes / k_codes with q_scales / k_scales, int32 sums
  values,   // q_values / k_values, products summed by qk_acc
};

inline constexpr int kMaxDot4Splits = 64;  // split-K: each split's (m, l, lp) sits in shared memory

struct Dot4Inputs {
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;  // dim a multiple of 4 and of the wave size
  Dot4Qk qk = Dot4Qk::integer;
  int groups = 1;                                      // integer QK: scale groups along d (d / groups % 4 == 0)
  std::vector<std::int8_t> q_codes, k_codes;           // integer QK: [H, N, d] (int8 or int4 values)
  std::vector<float> q_scales, k_scales;               // integer QK: [H, N, groups]
  std::vector<float> q_values, k_values;               // float QK: [H, N, d]
  std::vector<float> q_row_scales, k_row_scales;       // float QK: [H, N] scales applied to the codes' sum (scaled_after_qk); empty: none
  std::vector<float> v;                                // [Hkv, N, d] values as the emulator multiplies them
  std::vector<float> v_column_scales;                  // [Hkv, d]: O x scale before / l (v_scaled_after_pv); empty: none
  std::vector<int> rows;                               // query rows to evaluate
  bool causal = false;
  int window = 0;
  float score_factor = 0;                              // fp32(softmax scale) * fp32(log2 e), as the emulator
  FormatId p_format = FormatId::e4m3;
  float p_multiplier = 448;
  bool denominator_quantized = true;
  FormatId out = FormatId::fp32;  // the stored output: fp32, or O rounded to fp16 / bf16
  bool reverse_key_tiles = false;  // order=reverse: the last visible key tile first (split_k 1)
  Accumulator qk_acc;                                  // values QK^T: the model (channels in order)
  Accumulator pv_acc;                                  // P V: the model (each tile's keys in order)
  std::vector<float> v_means;                          // V smoothing: [Hkv, d] (V above is minus these); empty: none
  float lazy_rescale_tau = 0;                          // 0: rescale whenever the max grows
  int split_k = 1;                                     // key splits per row (at most kMaxDot4Splits), merged as the emulator
  int block_k = 64;                                    // key tile (multiple of the wave size)
  // The float softmax's vendor math (recipe.hpp): expform lab or fa, rowsum sequential or lanes.
  ExpForm exp_form = ExpForm::lab;
  RowSum row_sum = RowSum::sequential;
  Norm norm = Norm::div;
  Exp2Math exp2 = Exp2Math::rn;
};

struct Dot4Tuning {
  int rows_per_block = 4;  // waves per thread block; never changes results
};

// Runs the kernel; returns [Hq, rows, d]. Throws std::invalid_argument on unsupported shapes and
// std::runtime_error on a CUDA/HIP error.
std::vector<float> flash_dot4(const Dot4Inputs& in, const Dot4Tuning& tuning = {});

// From raw fp32 Q and K to the output: the preparation kernels (prepare.cu: rotation, K smoothing,
// Q smoothing, int8 codes or float rounding of Q and K) feed the kernel on the device. `in` carries
// qk, V, the rows, masks, P and the accumulators (its Q/K arrays are ignored). Returns [Hq, rows, d].
std::vector<float> flash_dot4_prepared(const Problem& p, const Recipe& r, const Dot4Inputs& in, const Dot4Tuning& tuning = {});

// Test hook: the int32 logits of query (h, i) against key j, one per scale group, computed by the
// device's dot4 path: [count][groups].
std::vector<int> dot4_logits(const Dot4Inputs& in, const std::vector<int>& h, const std::vector<int>& i, const std::vector<int>& j);

// The wave size of the current device (what the kernel's shape limits are multiples of).
int dot4_wave_size();

std::string device_name();

// The family as dispatch's table sees it (dot4_family.cpp). Why it does not take the recipe's values
// ("" when it does); its inputs, from the same quantizers the emulator uses; its launch (fills out
// [Hq, rows, d], returns the kernel's name).
std::string dot4_not_covered(const Problem& p, const Recipe& r);
Dot4Inputs make_inputs(const Problem& p, const Recipe& r);
const char* run_dot4(const Problem& p, const Recipe& r, std::vector<float>& out);
// Why a one-wave-per-row family (dot4, integer) cannot take this head dim or key tile ("" if it can).
std::string wave_shape_not_covered(int dim, int block_k, bool tiled);

}  // namespace qattn::gpu
