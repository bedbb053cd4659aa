#pragma once
// Host interface of the fast decode path: the same inputs (DecodeInputs), the same packed device
// cache (pack_decode_cache) and the same recipe as flash_decode (flash_decode.hpp), which stays the
// bit-faithful reference. What may differ from the emulator is fp32 rounding in P V only: each warp
// of a split block sums its own key tiles on the matrix units (fp16 operands holding V's codes and P
// exactly, or P times V's per-key scale as two fp16 terms; fp32 accumulation), rescaled between its
// tiles, and the warps' sums are added in warp order. The scores (exact int8 dot products, block
// scales summed in block order), the running max, P's quantization per key tile of each split and
// the row sums are the reference's operations, so the emulator's.
//
// Covered: what flash_decode covers at head dims 32, 64, 128 and 256, except that q8_0 / q4_0 need a
// V scale group that is a multiple of 32, and one warp's key tile must fit the device's shared
// memory. Anything else throws std::invalid_argument naming the field.
#include <vector>

#include "kernels/gpu/decode/flash_decode.hpp"

namespace qattn::gpu {

// Tuning: never changes a result (a test proves it).
struct DecodeFastTuning {
  int stages = 1;           // tile buffers per warp: 1 (K and V of the next tile still copied while this one's P V and S run) or 2 (1 when 2 do not fit)
  int merge_threads = 128;  // threads per merge block: a multiple of the wave size, at most 1024
};

// Runs the split and merge kernels; returns [B][Hq][d]. Throws std::invalid_argument on unsupported
// shapes or inconsistent inputs, std::runtime_error on a CUDA/HIP error.
std::vector<float> flash_decode_fast(const DecodeInputs& in, const DecodeFastTuning& tuning = {});

// As bench_flash_decode (the same random inputs, recipe and byte count), for the fast path.
// DecodeBench::fused_pv is true: the fast path always accumulates P V with fused multiply-adds.
DecodeBench bench_flash_decode_fast(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                                    const DecodeFastTuning& tuning = {});

}  // namespace qattn::gpu
