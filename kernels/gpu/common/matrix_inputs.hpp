#pragma once
// The operands both matrix-unit families (mma/, wgmma/) take, as the host prepares them from the
// emulator's quantizers (common/matrix_family.cpp) and their host layouts (common/matrix_host.hpp)
// upload them. A type both families share lives here, so that neither family includes the other.
#include <cstdint>
#include <vector>

#include "kernels/formats/format.hpp"

namespace qattn::gpu {

// bf16 operands run on the wgmma family only (wgmma/flash_wgmma.hpp); flash_mma refuses them.
enum class QkType : std::uint8_t { int8, fp16, bf16 };
enum class PvType : std::uint8_t { e4m3, fp16, bf16 };

inline constexpr int kMmaKeyTile = 64;  // Bc of the mma family; a covered recipe has tiles.block_k = 64
// The matrix families' device layouts hold whole tiles of the largest key tile either reads (the
// wgmma family's 128): a tile's copies, and its keys' scales, never run past a head's keys.
inline constexpr int kMatrixKeyPad = 128;

struct MmaInputs {
  QkType qk = QkType::int8;
  PvType pv = PvType::e4m3;
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;  // dim 64, 128 or 256
  std::vector<std::int8_t> q_codes, k_codes;           // int8 QK: [H][N][d]
  std::vector<float> q_scales, k_scales;               // int8 QK: [H][N]
  std::vector<float> q_values, k_values;               // fp16 (bf16) QK: fp16- (bf16-) representable values [H][N][d]
  std::vector<float> v_values;                         // [Hkv][N][d]: e4m3 code values, fp16 or bf16 values
  std::vector<float> v_scales;                         // e4m3 PV: [Hkv][d]; empty means 1
  std::vector<int> rows;                               // query rows returned (all are computed)
  bool causal = false;
  int window = 0;
  float score_factor = 0;                              // fp32(softmax scale) * fp32(log2 e), as the emulator
  float p_multiplier = 448;                            // e4m3 P: P * multiplier is rounded; fp16 and bf16 P: 1
  bool denominator_quantized = true;
  FormatId out = FormatId::fp32;                       // the stored output: fp32, or O rounded to fp16 / bf16
  int key_tile = kMmaKeyTile;                          // the recipe's tiles.block_k: 64, or 128 (wgmma only)
};

}  // namespace qattn::gpu
