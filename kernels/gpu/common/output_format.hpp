#pragma once
// The output as a kernel stores it (the recipe's `out`). After a family's kernel has written O / l in
// fp32, one elementwise pass on the device rounds it to fp16 or bf16 by round_float_to (the formats
// layer's, equal to the emulator's codec); fp32 needs none. A pass of its own rather than a branch in
// each epilogue: that branch made ptxas serialize the wgmma family's matrix instructions (C7518) and
// would have cost every fp32 run.
#include <cstddef>

#include "kernels/formats/format.hpp"

namespace qattn::gpu {

// Rounds out[0, count) on the device to `format` (fp32: nothing to do).
void round_output(float* out, std::size_t count, FormatId format);

}  // namespace qattn::gpu
