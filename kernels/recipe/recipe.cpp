#include "kernels/recipe/recipe.hpp"

#include <cmath>
#include <stdexcept>

namespace qattn {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw std::invalid_argument("recipe field '" + field + "': " + why);
}

void check_operand(const OperandQuant& o, const char* name) {
  const std::string n = name;
  const Format f = format_of(o.spec.format);
  if (o.spec.format == FormatId::e8m0) bad(n + ".format", "e8m0 is a scale format, not an element format");
  if (o.unit_scale) {
    if (f.kind == Kind::integer) bad(n + ".scale", std::string("an integer format (") + name_of(o.spec.format) + ") needs a scale rule, not unit scale");
    return;
  }
  if (const auto p = spec_problem(o.spec)) bad(n + "." + p->field, p->why);
}

// P is formed in the softmax as fp(P x multiplier): its format and static multiplier are all it takes.
void check_p(const OperandQuant& p) {
  if (p.unit_scale) return;
  if (p.spec.rule != ScaleRule::static_multiplier) {
    bad("p.scale", "P is quantized with a static multiplier (P <= 1 after the running max: 127, 448, 240)");
  }
  const QuantSpec& s = p.spec;
  if (s.scale_format != FormatId::fp32 || s.divide || s.amax_mul || s.half_away || s.scale_eps != 0 || s.codes_fp32 || s.signed_max ||
      s.scale_max != 0) {
    bad("p", "P takes a format and a static multiplier only (e.g. p=e4m3/static:448); /scale, /div, /amax, /round, /eps, /codes and /max "
             "apply to Q, K and V");
  }
}

void check_acc(const Accumulator& a, const char* name) {
  const std::string n = name;
  if (a.chunk <= 0) bad(n + ".chunk", "must be positive (16 or 32 on real MMA units)");
  if (a.align_bits < 2 || a.align_bits > 60) bad(n + ".align_bits", "expected 2..60");
  // A fused chunk sums up to 257 aligned values below 2^(align_bits + 1) each: exact in a double
  // while align_bits + 10 <= 53; 40 leaves room.
  if (a.fused && a.align_bits > 40) bad(n + ".align_bits", "expected 2..40 for a fused accumulator");
  if (a.fused && a.chunk > 256) bad(n + ".chunk", "expected <= 256 for a fused accumulator");
  if (a.chunk_mantissa_bits < 1 || a.chunk_mantissa_bits > 52) bad(n + ".chunk_mantissa_bits", "expected 1..52");
  if (a.acc_mantissa_bits < 1 || a.acc_mantissa_bits > 23) bad(n + ".acc_mantissa_bits", "expected 1..23 (an fp32 register holds at most 23)");
  if (a.flush_every < 0) bad(n + ".flush_every", "must be >= 0 (0 = single level)");
  if (a.factor_exponent_min != Accumulator::kTrueExponents) {
    if (!a.fused) bad(n + ".factor_exponent_min", "applies to fused accumulators only (fused=1)");
    // A format's smallest normal exponent: fp16 -14, bf16 and fp32 -126, e4m3 -6.
    if (a.factor_exponent_min < -1022 || a.factor_exponent_min > 0) bad(n + ".factor_exponent_min", "expected -1022..0");
  }
}

}  // namespace

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

void validate(const Recipe& r) {
  check_operand(r.q, "q");
  check_operand(r.k, "k");
  check_p(r.p);
  check_operand(r.p, "p");
  check_operand(r.v, "v");
  check_acc(r.qk_acc, "acc.qk");
  check_acc(r.pv_acc, "acc.pv");
  const bool qi = format_of(r.q.spec.format).kind == Kind::integer, ki = format_of(r.k.spec.format).kind == Kind::integer;
  if (qi != ki) bad("q.format/k.format", "QK^T needs both operands integer or both float");
  if (qi) {
    for (const auto* o : {&r.q, &r.k}) {
      if (o->spec.granularity == Granularity::channel) {
        bad(o == &r.q ? "q.granularity" : "k.granularity",
            "a per-channel scale varies along the head dim, so an integer QK^T cannot factor it out; use tensor, head, token, block or group");
      }
    }
    if (r.q.spec.granularity == Granularity::group || r.k.spec.granularity == Granularity::group) {
      if (r.q.spec.granularity != r.k.spec.granularity || r.q.spec.block != r.k.spec.block) {
        bad("q.granularity/k.granularity", "group scales on an integer QK^T need the same group on Q and K (one int dot per group)");
      }
    }
    if (r.qk_acc.kind != Accumulator::Kind::exact) bad("acc.qk", "integer QK^T accumulates in int32, exactly: use 'exact' (the default for integer Q and K)");
  }
  // Upper bounds: the emulator keeps a split's partial output per row of a query tile, so memory
  // grows as tile rows x splits x d. 4096 is past any kernel's tile (<= 256) or key split (decode
  // kernels use <= 256) and keeps a mistyped value (split=1000000000) an error, not an allocation.
  if (r.tiles.block_q <= 0 || r.tiles.block_k <= 0 || r.tiles.block_q > 4096 || r.tiles.block_k > 4096) {
    bad("tiles", "block sizes must be 1..4096");
  }
  if (r.split_k < 1 || r.split_k > 4096) bad("split", "expected 1..4096");
  if (r.split_pad < 0 || r.split_pad > 65536) bad("split.pad", "expected 0..65536 cells (0: split the visible key tiles)");
  if (r.split_min < 0 || r.split_min > (1 << 30)) bad("split.min", "expected 0..2^30 cells");
  if (r.split_min > 0 && r.split_pad == 0) bad("split.min", "a minimum cell count for splitting needs split.pad (splits by cache cell)");
  if (r.split_pad > 0 && r.tiles.block_k != 1) {
    bad("split.pad", "splits by cache cell are modelled one key a tile (tiles=Nx1): a tile of several keys could straddle two chunks");
  }
  if (!(r.lazy_rescale_tau >= 0) || !std::isfinite(r.lazy_rescale_tau)) bad("tau", "must be >= 0 (0 = always rescale)");
  if (r.k_smoothing_block < 0) bad("ksmooth_block", "must be >= 0 (0 = the K tile)");
  if (r.softmax != SoftmaxKind::float_online) {
    // QFlash compares integer scores across tiles directly: one scale per head (or tensor) for
    // Q, K and V, int8 everywhere, P requantized to int8 (static 127), integer accumulators.
    for (const auto& [o, name] : {std::pair{&r.q, "q"}, std::pair{&r.k, "k"}, std::pair{&r.v, "v"}}) {
      const bool shared = o->spec.granularity == Granularity::tensor || o->spec.granularity == Granularity::head;
      if (o->unit_scale || o->spec.format != FormatId::int8 || !shared || o->spec.rule != ScaleRule::dynamic_absmax || o->spec.signed_max) {
        bad(std::string(name), "an integer softmax (qflash, shiftmax) needs int8 with a per-tensor or per-head dynamic absmax scale (e.g. int8/tensor; "
                             "not amax:signed, whose scale carries a sign)");
      }
    }
    if (r.p.unit_scale || r.p.spec.format != FormatId::int8 || r.p.spec.multiplier != 127) {
      bad("p", "an integer softmax (qflash, shiftmax) produces int8 P: use p=int8/static:127");
    }
    if (r.pv_acc.kind != Accumulator::Kind::exact || r.qk_acc.kind != Accumulator::Kind::exact) {
      bad("acc", "an integer softmax accumulates in integers: use acc.qk=exact and acc.pv=exact");
    }
    if (r.split_k != 1 || r.lazy_rescale_tau != 0 || r.k_smoothing != KSmoothing::none || r.q_smoothing || r.v_smoothing ||
        r.rotation != Rotation::none) {
      bad("softmax", "an integer softmax runs without split-K, lazy rescale, smoothing or rotation");
    }
  }
  if (r.softmax != SoftmaxKind::qflash_integer && !(r.qflash == QFlashVariant{})) {
    bad("qflash", "the qflash.* keys choose QFlash's integer constants and steps: they need softmax=qflash");
  }
  if (r.k_smoothing_format != FormatId::fp32 && r.k_smoothing_format != FormatId::fp16 && r.k_smoothing_format != FormatId::bf16) {
    bad("ksmooth.format", std::string("'") + name_of(r.k_smoothing_format) + "': expected fp32, fp16 or bf16");
  }
  if (r.k_smoothing_format != FormatId::fp32 && r.k_smoothing != KSmoothing::global_mean && r.k_smoothing != KSmoothing::block_mean) {
    bad("ksmooth.format", "a K-mean format needs ksmooth=global or ksmooth=block");
  }
  if (r.reverse_key_tiles && (r.split_k != 1 || r.softmax != SoftmaxKind::float_online)) {
    bad("order", "reverse key tiles are modelled for the float softmax without key splits (split=1)");
  }
  if ((r.exp_form != ExpForm::lab || r.row_sum != RowSum::sequential || r.norm != Norm::div || r.exp2 != Exp2Math::rn) &&
      r.softmax != SoftmaxKind::float_online) {
    bad("expform/rowsum/norm/exp2", "the vendor math of the float softmax: they need softmax=float");
  }
  if (r.exp_form == ExpForm::aten && (r.split_k != 1 || r.q_prescale || r.lazy_rescale_tau != 0)) {
    bad("expform", "aten keeps m on the scaled scores in natural-log units, as ATen's CPU kernel does, one split without a prescaled Q "
                   "or lazy rescale: expected split=1, qprescale=0, tau=0");
  }
  if (r.exp_form == ExpForm::fa && r.lazy_rescale_tau != 0) {
    bad("expform", "fa keeps the running max on raw scores; the lazy rescale's tau is in exp2 units: use one of them (tau=0)");
  }
  if ((r.q_prescale || r.qk_scale_sequential || r.pad_keys_zero) && r.softmax != SoftmaxKind::float_online) {
    bad("qprescale/qkscale/pad", "these are float-softmax choices: they need softmax=float");
  }
  if (r.k_zero_q_sum && (r.q.unit_scale || r.k.unit_scale || format_of(r.q.spec.format).kind != Kind::integer || r.k.spec.format != FormatId::int4 ||
                         r.k.spec.granularity != Granularity::group || r.q_smoothing || r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none ||
                         r.qk_scale_sequential)) {
    bad("kzero", "qsum takes int4 K (stored as codes + 8) and integer Q with group scales, without smoothing, rotation or qkscale (e.g. q=int8/group:32 "
                 "k=int4/group:32/scale:fp16/amax:signed)");
  }
  if (r.out != FormatId::fp32 && r.out != FormatId::fp16 && r.out != FormatId::bf16) {
    bad("out", std::string("'") + name_of(r.out) + "': expected fp32, fp16 or bf16 (the output format the kernel stores)");
  }
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
