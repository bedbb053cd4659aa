#pragma once
// NVIDIA only: the special-function unit's approximate exp2 and reciprocal (PTX ex2.approx and
// rcp.approx, the instructions a fast-math softmax compiles to), applied on the GPU to given inputs
// and swept over every fp32 input, so that the emulator's models of them are measured, not assumed.
#include <array>
#include <cstdint>
#include <vector>

namespace qattn::gpu {

enum class SfuOp { ex2_ftz, ex2, rcp_ftz, rcp };  // ex2.approx.ftz.f32, ex2.approx.f32, rcp.approx.ftz.f32, rcp.approx.f32

// op applied to each input (fp32 bit patterns in, bit patterns out).
std::vector<std::uint32_t> sfu_apply(SfuOp op, const std::vector<std::uint32_t>& x);

// One sweep of all 2^32 input patterns of an ftz op, tallied per input binade (sign, biased exponent):
//   dev[s][e][c]: result minus the correctly rounded value in units in the last place, c = dev + 3 for
//     |dev| <= 3; c = 7: any other outcome (a flushed or non-finite result where the correct one is not).
//   miss[h][s][e]: results that differ from the base-binade table prediction under hypothesis h
//     (ex2: the input's fixed-point fraction with 23 bits by floor, round to nearest even, truncation;
//     rcp: h = 0 only, the mantissa's table entry scaled by the exponent); ftz expected below 2^-126.
//   nonftz[s][e]: inputs where the op's non-ftz form gives other bits.
// The table is the op on the base binade: ex2 at -2 + i 2^-23, rcp at 1 + i 2^-23, i < 2^23.
struct SfuSweep {
  std::vector<std::uint32_t> table;
  std::array<std::array<std::array<std::uint64_t, 8>, 256>, 2> dev{};
  std::array<std::array<std::array<std::uint64_t, 256>, 2>, 3> miss{};
  std::array<std::array<std::uint64_t, 256>, 2> nonftz{};
};
SfuSweep sfu_sweep(SfuOp op);  // op: ex2_ftz or rcp_ftz

}  // namespace qattn::gpu
