#pragma once
// Host interface of the fast decode path: the same inputs (DecodeInputs), the same packed device
// cache (pack_decode_cache) and the same recipe as flash_decode (flash_decode.hpp), which stays the
// bit-faithful reference. What may differ from the emulator is fp32 rounding in P V only: its
// summation order (each thread sums a slice of the keys, the slices are added at the end of a split)
// and fused multiply-adds there. The scores (exact int8 dot products, block scales summed in block
// order), the running max, P's quantization per key tile of each split and the row sums are the
// reference's operations, so the emulator's.
//
// Covered: what flash_decode covers, except that q8_0 / q4_0 need a V scale group that is a multiple
// of the channels one thread reads (32 / H, H the query heads a block serves: 8, 4, 2 or 1, the
// largest dividing the GQA group; the q8_0 / q4_0 group of 32 always qualifies), e4m3 V scales must be
// below 2^120 in magnitude, and a tile's buffers must fit the device's shared memory (two of them).
// Anything else throws std::invalid_argument naming the field.
#include <vector>

#include "kernels/gpu/flash_decode.hpp"

namespace qattn::gpu {

// Tuning: never changes a result (a test proves it).
struct DecodeFastTuning {
  int stages = 3;           // tile buffers in the copy pipeline: 2 or 3 (fewer when 3 do not fit)
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
