// NVIDIA only (with the families it feeds): the matrix families' benchmark inputs (matrix_bench.hpp).
#include "kernels/gpu/bench/bench_fill.hpp"
#include "kernels/gpu/bench/matrix_bench.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

RandomMmaDevice random_mma_device(DeviceBuffers& mem, QkType qk, PvType pv, VtElement vt_element, int hq, int hkv, int n, int dim) {
  RandomMmaDevice r;
  r.np = mma_padded_tokens(n);
  const long qk_bytes = qk_element_bytes(qk), v_bytes = vt_element == VtElement::e4m3_code ? 1 : 2;
  const Fill qk_fill = qk == QkType::int8 ? Fill::int8 : (qk == QkType::bf16 ? Fill::bf16 : Fill::fp16);
  const Fill v_fill = pv == PvType::fp16 ? Fill::fp16
                      : pv == PvType::bf16 ? Fill::bf16
                                           : (vt_element == VtElement::e4m3_code ? Fill::e4m3_code : Fill::e4m3_as_fp16);
  std::uint8_t* q = mem.alloc<std::uint8_t>(static_cast<long>(hq) * n * dim * qk_bytes);
  std::uint8_t* k = mem.alloc<std::uint8_t>(static_cast<long>(hkv) * r.np * dim * qk_bytes);
  std::uint8_t* vt = mem.alloc<std::uint8_t>(static_cast<long>(hkv) * dim * r.np * v_bytes);
  fill_random(q, static_cast<long>(hq) * n * dim, qk_fill, 1);
  fill_random(k, static_cast<long>(hkv) * r.np * dim, qk_fill, 2);
  fill_random(vt, static_cast<long>(hkv) * dim * r.np, v_fill, 3);
  r.q = q;
  r.k = k;
  r.vt = vt;
  if (qk == QkType::int8) {
    float* qs = mem.alloc<float>(static_cast<long>(hq) * n);
    float* ks = mem.alloc<float>(static_cast<long>(hkv) * r.np);
    fill_random(qs, static_cast<long>(hq) * n, Fill::scale, 4, 0.01f, 0.02f);  // logits of a few units, as real scores
    fill_random(ks, static_cast<long>(hkv) * r.np, Fill::scale, 5, 0.01f, 0.02f);
    r.q_scales = qs;
    r.k_scales = ks;
  }
  float* vsc = mem.alloc<float>(static_cast<long>(hkv) * dim);
  fill_random(vsc, static_cast<long>(hkv) * dim, Fill::scale, 6, 0.001f, 0.002f);
  r.v_scales = vsc;
  r.out = mem.alloc<float>(static_cast<long>(hq) * n * dim);
  return r;
}

}  // namespace qattn::gpu
