#pragma once
// What the matrix families (flash_mma, flash_wgmma) do per lane on the accumulator fragments both
// hold: each lane owns rows g and g + 8 of its warp's 16, and columns 2 t, 2 t + 1 of each block of
// 8 (g = lane / 4, t = lane % 4). Device code, NVIDIA (include after platform.hpp).
#include <cmath>

namespace qattn::gpu {

#if defined(__CUDACC__)

// Whether key j is visible from query row i: one of the n keys, not after i when causal, within the
// window (|i - j| < window) when there is one. The emulator's mask.
__device__ inline bool key_visible(int i, int j, int n, bool causal, int window) {
  if (j >= n) return false;
  if (causal && j > i) return false;
  if (window > 0 && (i - j >= window || j - i >= window)) return false;
  return true;
}

// The key tiles [begin, end) (absolute tiles of `tile` keys, as the emulator iterates them) that
// query rows [i0, i0 + rows) see.
struct KeyTiles {
  int begin, end;
};
__device__ inline KeyTiles key_tiles(int i0, int rows, int n, bool causal, int window, int tile) {
  int lo = 0, hi = n;
  const int i_last = min(n, i0 + rows) - 1;
  if (causal) hi = min(n, i_last + 1);
  if (window > 0) {
    lo = max(0, i0 - window + 1);
    if (!causal) hi = min(n, i_last + window);
  }
  return {lo / tile, (hi + tile - 1) / tile};
}

// out[row][c] = O[row][c] vscale[c] / l for the lane's two rows (rows at or past n are not written):
// l is the row sum of the quantized P (or of P before rounding, times the multiplier), summed over
// the quad; o_at(nc, u) is the lane's O element u (rows g, g, g+8, g+8; columns 2t, 2t+1) of channel
// block nc.
template <int D, typename OAt>
__device__ inline void store_rows(float* out, const float* v_scales, int n, const int row[2], const float l[2],
                                  bool denominator_quantized, float p_mult, int q4, OAt o_at) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float lt = quad_sum(l[r]);
    const float denom = denominator_quantized ? lt : lt * p_mult;
    if (row[r] >= n) continue;
    float* dst = out + static_cast<long>(row[r]) * D;
#pragma unroll
    for (int nc = 0; nc < D / 8; ++nc) {
      const int c = nc * 8 + 2 * q4;
      const float vs0 = v_scales ? v_scales[c] : 1.0f, vs1 = v_scales ? v_scales[c + 1] : 1.0f;
      *reinterpret_cast<float2*>(dst + c) = make_float2(o_at(nc, 2 * r) * vs0 / denom, o_at(nc, 2 * r + 1) * vs1 / denom);
    }
  }
}

#endif  // __CUDACC__

}  // namespace qattn::gpu
