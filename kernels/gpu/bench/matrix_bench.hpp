#pragma once
// The matrix families' benchmark inputs: random device-resident data of one shape in the layouts
// common/matrix_host.hpp describes (bench_fill.hpp's data). For .cu files (after platform.hpp).
#include <cmath>

#include "kernels/gpu/common/matrix_host.hpp"

namespace qattn::gpu {

// Random device-resident inputs of a benchmark shape, in these layouts (bench_fill.hpp's data).
struct RandomMmaDevice {
  const std::uint8_t *q = nullptr, *k = nullptr, *vt = nullptr;
  const float *q_scales = nullptr, *k_scales = nullptr, *v_scales = nullptr;  // q/k scales for int8 only
  float* out = nullptr;
  int np = 0;
};
RandomMmaDevice random_mma_device(DeviceBuffers& mem, QkType qk, PvType pv, VtElement vt, int hq, int hkv, int n, int dim);

// A benchmark's Params: random inputs of one shape, softmax scale 1/sqrt(d), P x 448 for e4m3 (1 for fp16 and bf16).
template <typename Params>
void set_bench(Params& p, const RandomMmaDevice& d, PvType pv, int hq, int hkv, int n, int dim, bool causal) {
  p.q = d.q;
  p.k = d.k;
  p.vt = d.vt;
  p.q_scales = d.q_scales;
  p.k_scales = d.k_scales;
  p.v_scales = d.v_scales;
  p.out = d.out;
  const float c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))) * 1.44269504088896340736f;  // scale * log2(e)
  set_shape(p, hq, hkv, n, d.np, causal, 0, true, c, pv == PvType::e4m3 ? 448.0f : 1.0f);
}

}  // namespace qattn::gpu
