#pragma once
// The operands as the GPU families read them when the host prepares them: from the same quantizers
// the emulator uses (kernels/formats/quantizer.hpp), so a family that takes its inputs from here
// sees the emulator's codes and scales bit for bit. What the families' coverage rules ask of an
// operand is here too, once.
#include <cstdint>
#include <vector>

#include "kernels/formats/quantizer.hpp"
#include "kernels/problem/problem.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::gpu {

// Integer codes with scales (not a float format's rounded values).
bool integer_codes(const OperandQuant& o);
// Scale groups along d of an integer operand (one unless group granularity).
int scale_groups(const OperandQuant& o, int dim);
// int8 with dynamic absmax scales in fp32, one per tensor, head or token: the matrix families' int8.
bool int8_token_scaled(const OperandQuant& o);
// Rounded to format f with no scale.
bool rounded_to(const OperandQuant& o, FormatId f);
// Rounded (no scale) to a format whose every value fp16 holds exactly: the fp16 HMMA multiplies it
// unchanged (e4m3: |x| <= 448, quantum >= 2^-9; e5m2: <= 57344, >= 2^-16; fp16's own 65504, 2^-24).
bool fp16_exact(const OperandQuant& o);
// Rotation or smoothing: the inputs come from the preparation kernels (prepare/), not the host.
bool needs_preparation(const Recipe& r);

// An integer format's codes as signed bytes.
std::vector<std::int8_t> signed_codes(const QuantizedTensor& t, FormatId format);

// Integer Q/K codes and their scales per (head, token, group), whatever the granularity, as the
// kernels read them.
struct IntQK {
  int groups = 1;
  std::vector<std::int8_t> q_codes, k_codes;
  std::vector<float> q_scales, k_scales;
};
IntQK int_qk(const Problem& p, const Recipe& r);
IntQK int_qk(const TensorF& q, const TensorF& k, const Recipe& r);  // K already prepared (smoothed on the host)

// An operand's values as the emulator multiplies them: rounded to its format, or quantized and
// dequantized.
std::vector<float> operand_values(const TensorF& t, const OperandQuant& o);

// A float Q or K that an MMA model sees as codes (scaled_after_qk): its codes' values, and in
// row_scales the scale of each (head, token), as the emulator prepares it.
std::vector<float> operand_codes(const TensorF& t, const OperandQuant& o, std::vector<float>& row_scales);

}  // namespace qattn::gpu
