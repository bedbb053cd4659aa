#pragma once
// Host interface of the integer-softmax family (portable: CUDA and HIP): QFlash's integer online
// softmax and I-ViT's shiftmax on the GPU, with the emulator's integer functions
// (kernels/numerics/qflash.hpp, shared host/device). int8 Q, K and V codes with one scale per head
// (or tensor); S = Q K^T by dot4 (int32, exact); every softmax quantity an integer; O in integers,
// scaled once at the end. Every operation is exact or the emulator's own, so the output is the
// emulator's bit for bit.
//   QFlash:   key tiles of block_k, running integer max from -2^21, P8 = requantize(ShiftExp2),
//             l and O released by alpha / I0 per tile, out = floor(O / l) * s_v.
//   shiftmax: the whole row at once (it predates tiling): max, sum of exp, P in 7 bits,
//             out = O * 2^-7 * s_v.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

inline constexpr const char* kIntegerKernelName = "flash_integer";

enum class IntegerSoftmax : std::uint8_t { qflash, shiftmax };

struct IntegerInputs {
  IntegerSoftmax softmax = IntegerSoftmax::qflash;
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;  // dim a multiple of 4 and of the wave size
  std::vector<std::int8_t> q_codes, k_codes, v_codes;  // [H][N][d]
  std::vector<float> q_scales;                         // [Hq]: one per head
  std::vector<float> k_scales, v_scales;               // [Hkv]
  std::vector<int> rows;                               // query rows to evaluate
  bool causal = false;
  int window = 0;
  double softmax_scale = 0;                            // the problem's scale (1/sqrt(d) unless set)
  int block_k = 64;                                    // QFlash's key tile (multiple of the wave size)
};

struct IntegerTuning {
  int rows_per_block = 4;  // waves per thread block; never changes results
};

// Runs the kernel; returns [Hq, rows, d]. Throws std::invalid_argument on unsupported shapes and
// std::runtime_error on a CUDA/HIP error.
std::vector<float> flash_integer(const IntegerInputs& in, const IntegerTuning& tuning = {});

// The family as dispatch's table sees it (integer_family.cpp): its rule ("" when it takes the
// recipe's values), its inputs from the emulator's quantizers, its launch.
std::string integer_not_covered(const Problem& p, const Recipe& r);
IntegerInputs make_integer_inputs(const Problem& p, const Recipe& r);
const char* run_integer(const Problem& p, const Recipe& r, std::vector<float>& out);

}  // namespace qattn::gpu
