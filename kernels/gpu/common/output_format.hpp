#pragma once
// The output as a kernel stores it (the recipe's `out`): O / l rounded to fp16 or bf16 by the lab's
// one codec (kernels/formats/codec.hpp, as the emulator rounds it), held in the fp32 array every
// family returns; fp32: O / l as computed. Host and device.
#include "kernels/formats/codec.hpp"

namespace qattn::gpu {

QATTN_HD inline float stored_output(float x, const Format& out) { return round_float_to(out, x); }

}  // namespace qattn::gpu
