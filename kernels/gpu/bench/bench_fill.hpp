#pragma once
// NVIDIA only: random device data for the benchmarks, made on the device by a counter hash (no
// host transfer; a seed gives the same data every run).
#include <cstdint>

namespace qattn::gpu {

// int8: codes in [-127, 127]. e4m3_as_fp16: e4m3 values (no NaN) stored widened to fp16 (the mma
// family's V). e4m3_code: the same values as e4m3 bytes (the wgmma family's V). fp16 and bf16:
// values uniform in [-2, 2), rounded to the format. scale: fp32 in [lo, hi).
enum class Fill { int8, e4m3_as_fp16, e4m3_code, fp16, bf16, scale };

// Fills `count` elements of `kind` at dst (elements of 1, 2 or 4 bytes as the kind says).
void fill_random(void* dst, long count, Fill kind, std::uint64_t seed, float lo = 0, float hi = 0);

}  // namespace qattn::gpu
