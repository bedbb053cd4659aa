#pragma once
// The recipes the matrix families (flash_mma, flash_wgmma) run in their tests: QK^T in int8
// (per-token scales, exact int32), fp16 or bf16 (rounded, accumulating as qk_float_acc); P and V in
// e4m3 (P x 448, V per-channel scales), fp16 or bf16 (rounded), accumulating as pv_acc; 64-key tiles.
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/recipe/recipe.hpp"

namespace qattn::test {

inline Recipe matrix_recipe(gpu::QkType qk, gpu::PvType pv, const Accumulator& qk_float_acc, const Accumulator& pv_acc) {
  Recipe r;
  if (qk == gpu::QkType::int8) {
    r.q.unit_scale = r.k.unit_scale = false;
    r.q.spec.format = r.k.spec.format = FormatId::int8;
    r.q.spec.granularity = r.k.spec.granularity = Granularity::token;
    r.qk_acc.kind = Accumulator::Kind::exact;
  } else {
    r.q.spec.format = r.k.spec.format = qk == gpu::QkType::bf16 ? FormatId::bf16 : FormatId::fp16;
    r.qk_acc = qk_float_acc;
  }
  if (pv == gpu::PvType::e4m3) {
    r.p.unit_scale = false;
    r.p.spec.format = FormatId::e4m3;
    r.p.spec.rule = ScaleRule::static_multiplier;
    r.p.spec.multiplier = 448;
    r.v.unit_scale = false;
    r.v.spec.format = FormatId::e4m3;
    r.v.spec.granularity = Granularity::channel;
  } else {
    r.p.spec.format = r.v.spec.format = pv == gpu::PvType::bf16 ? FormatId::bf16 : FormatId::fp16;
  }
  r.pv_acc = pv_acc;
  r.tiles.block_k = gpu::kMmaKeyTile;
  return r;
}

}  // namespace qattn::test
