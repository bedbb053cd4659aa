#pragma once
// The online softmax's scalar steps, as every float-softmax family takes them (flash_mma, flash_wgmma,
// flash_decode and its fast path; flash_dot4 with the emulator's exp2). Scores are in log2 units
// (the softmax scale times log2 e folded in before), so P = 2^(s - m) against the running max m.
// Device code for CUDA and HIP (include after platform.hpp).
#include <cmath>

#include "kernels/formats/exp2.hpp"

namespace qattn::gpu {

#if defined(QATTN_GPU_CUDA) || defined(QATTN_GPU_HIP)

// exp2f: the families proven against the emulator at 30 dB use the hardware's exp2 (ex2.approx plus
// a subnormal fix-up in CUDA's exp2f); bit-faithful ones pass the emulator's exp2 instead.
struct Exp2Hardware {
  __device__ float operator()(float x) const { return exp2f(x); }
};

// The emulator's exp2, rounded to nearest: for the families bit-equal to it (flash_dot4).
struct Exp2Emulator {
  __device__ float operator()(float x) const { return exp2_rn(x); }
};

// 2^(m_old - m_new): what rescales the sums taken against the old running max. A row that has seen
// no visible key (m_old = -inf) has summed nothing: 0, not 2^(-inf - m_new) = NaN when m_new = -inf.
template <class Exp2 = Exp2Hardware>
__device__ inline float rescale_factor(float m_old, float m_new, Exp2 exp2 = {}) {
  return m_old == -INFINITY ? 0.0f : exp2(m_old - m_new);
}

// P before quantization, 2^(s - m): a masked key (s = -inf) gives 0 even when m is -inf as well.
template <class Exp2 = Exp2Hardware>
__device__ inline float unnormalized_p(float s, float m, Exp2 exp2 = {}) {
  return s == -INFINITY ? 0.0f : exp2(s - m);
}

// One key tile's max folded into the running max of the two rows a lane holds in an m16 accumulator
// fragment (rows g and g + 8); score(b, c) is element c of the lane's 8-key block b (c = 2 r + e for
// row r, key 2 t + e of the block). The tile's max is taken over the quad, so the four lanes of a
// row agree on m; alpha[r] rescales the row's O and l.
template <int kBlocks, class Score>
__device__ inline void fold_tile_max(float (&m)[2], float (&alpha)[2], Score score) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) mx = fmaxf(mx, fmaxf(score(b, 2 * r), score(b, 2 * r + 1)));
    const float m_new = fmaxf(m[r], quad_max(mx));
    alpha[r] = rescale_factor(m[r], m_new);
    m[r] = m_new;
  }
}

#endif  // QATTN_GPU_CUDA || QATTN_GPU_HIP

}  // namespace qattn::gpu
