#include "kernels/recipe/recipe.hpp"

#include <cmath>
#include <stdexcept>

namespace qattn {

Recipe kv_groups_for(const Recipe& r, int q_heads, int kv_heads) {
  Recipe out = r;
  const auto grouped = [](OperandQuant& oq, int heads_per_scale) {
    if (!oq.unit_scale && oq.spec.granularity == Granularity::kvhead) oq.spec.block = heads_per_scale;
  };
  grouped(out.q, kv_heads > 0 ? q_heads / kv_heads : 0);
  grouped(out.k, 1);
  grouped(out.v, 1);
  return out;
}

Recipe tiles_for(const Recipe& r, int head_dim, bool causal, bool local) {
  if (!r.tiles.fa3_sm90) return r;
  // FlashAttention-3's hopper/tile_size.h (tile_size_fwd_sm90, the dense two-warpgroup forward, V
  // of Q's head dim, no paged KV or softcap): 16-bit 192x(128 causal, 160 local, else 192) up to d
  // 64, 192x(128 local, else 144) to 96, 128x(128 causal or local, else 176) to 128, 128x(96 local,
  // else 112: V's head dim is over 128) to 192, then 128x(64 local, else 80); 8-bit 192x160,
  // 192x128, 128x224, 128x160, 128x(64 local, else 128). Read at flash-attention 07602ad; the
  // local (windowed) choices, such as 160 keys at d <= 64, were not run against the kernel.
  const bool byte = format_of(r.q.spec.format).bits <= 8;
  Recipe out = r;
  Tiles& t = out.tiles;
  t.fa3_sm90 = false;
  if (head_dim <= 64) t = byte ? Tiles{192, 160} : Tiles{192, causal ? 128 : local ? 160 : 192};
  else if (head_dim <= 96) t = byte ? Tiles{192, 128} : Tiles{192, local ? 128 : 144};
  else if (head_dim <= 128) t = byte ? Tiles{128, 224} : Tiles{128, causal || local ? 128 : 176};
  else if (head_dim <= 192) t = byte ? Tiles{128, 160} : Tiles{128, local ? 96 : 112};
  else t = byte ? Tiles{128, local ? 64 : 128} : Tiles{128, local ? 64 : 80};
  return out;
}

void default_accumulators(Recipe& r, bool qk_given, bool pv_given) {
  const bool int_qk = !r.q.unit_scale && format_of(r.q.spec.format).kind == Kind::integer && !r.k.unit_scale &&
                      format_of(r.k.spec.format).kind == Kind::integer;
  if (int_qk && !qk_given) r.qk_acc.kind = Accumulator::Kind::exact;
  if (r.softmax != SoftmaxKind::float_online && !pv_given) r.pv_acc.kind = Accumulator::Kind::exact;
}

std::optional<double> static_p_flush_threshold(const OperandQuant& p) {
  if (p.unit_scale || p.spec.rule != ScaleRule::static_multiplier) return std::nullopt;
  return flush_threshold(format_of(p.spec.format)) / p.spec.multiplier;
}

}  // namespace qattn
