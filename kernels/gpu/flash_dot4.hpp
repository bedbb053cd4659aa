#pragma once
// Host interface of the generic dot4 flash-attention kernel family (runs on any GPU with a dot4
// instruction or its fallback): int8 Q/K codes with one scale per token (or per tensor, expanded),
// P quantized with a static multiplier through the lab's shared codec, V as values, fp32 PV.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"

namespace qattn::gpu {

struct Dot4Inputs {
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;  // dim a multiple of 4 and of the wave size
  std::vector<std::int8_t> q_codes, k_codes;           // [H, N, d]
  std::vector<float> q_scales, k_scales;               // [H, N]
  std::vector<float> v;                                // [Hkv, N, d] values as the emulator multiplies them
  std::vector<int> rows;                               // query rows to evaluate
  bool causal = false;
  int window = 0;
  float score_factor = 0;                              // fp32(softmax scale) * fp32(log2 e), as the emulator
  FormatId p_format = FormatId::e4m3;
  float p_multiplier = 448;
  bool denominator_quantized = true;
  int block_k = 64;                                    // key tile (multiple of the wave size)
};

struct Dot4Tuning {
  int rows_per_block = 4;  // waves per thread block; never changes results
};

// Runs the kernel; returns [Hq, rows, d]. Throws std::runtime_error on a CUDA/HIP error.
std::vector<float> flash_dot4(const Dot4Inputs& in, const Dot4Tuning& tuning = {});

// Test hook: the int32 logit of query (h, i) against key j, computed by the device's dot4 path.
std::vector<int> dot4_logits(const Dot4Inputs& in, const std::vector<int>& h, const std::vector<int>& i, const std::vector<int>& j);

std::string device_name();

}  // namespace qattn::gpu
