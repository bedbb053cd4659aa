// The fast decode path (flash_decode_fast.hpp): split-K decode over the packed int8 K cache and an
// e4m3 / q8_0 / q4_0 V cache, organized for bandwidth rather than for the emulator's summation order.
//
// Kernel 1, one block per (split, kv head x head chunk, batch), serving H query heads of the GQA
// group (H = 8, 4, 2 or 1, the largest dividing the group). The split's key tiles go to the block's
// W warps in rounds (tile r0 + w to warp w); a warp copies (its own cp.async groups, K and V apart),
// scores and accumulates its own tile, so a round costs one block barrier, not three per tile:
//   S = (sum over scale blocks of fp32(int dot) * (sq * sk)) * c       one lane per key, dp4a
//   [barrier] m_i = max(m_{i-1}, max S), in tile order                  every warp alike
//   P = round(exp2(S - m_i) * multiplier), row sums                      one lane per key
//   O_w = O_w * exp2(m_prev - m_i) + V^T P                               mma.sync, fp32 accumulators
//   l_i = alpha_i * l_{i-1} + sum P, in tile order, after the next       every warp alike
//   round's barrier (or the last one's)
// So the running max, P's codes and l are the reference's (decode_shared.hpp), and only P V's fp32
// rounding differs: each warp sums its own tiles (mma accumulation), rescaled from its previous
// tile's max, and the warps' sums are added in warp order at the end.
//
// P V as matrix products (m16n8k16, fp16 operands, fp32 accumulate): A = V^T (16 channels x 16
// keys, V's codes widened to fp16 exactly), B = P (16 keys x 8 heads). e4m3's channel scale is
// applied after the sum. q8_0 / q4_0's per-key scales (one per 32-channel span at least) are folded
// into B: B = P * s * 2^-E, split into two fp16 terms (hi + lo), E a power of two per tile from the
// bound P < 2^p_exp and the tile's largest scale, so that B < 2^15 (fp16's range); the tile's sum is
// rescaled by 2^E. hi + lo hold 22 bits of the fp32 product while B >= 2^-3; smaller B keeps fp16's
// absolute floor of 2^-24 (2^-39 of the bound): an error far below fp32's on the sum's large terms.
// P that fp16 holds exactly (e4m3, e5m2, int8, fp16, ...) is B's single term for e4m3 V.
// Where mma.sync is absent (HIP), the same lane-to-(channel, head) assignment runs as fp32 FMAs.
//
// Tuning (stages, merge threads) never changes a result: W and the key-to-warp map depend on the
// shape, the recipe and the K scales' width (fp16, or fp32 when a scale is not an fp16 value) only.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/decode/decode_shared.hpp"
#include "kernels/gpu/decode/flash_decode_fast.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

using namespace decode_detail;

namespace {

constexpr const char* kWho = "flash_decode_fast";
constexpr int kMaxWarps = 4;             // warps of a split block; more blocks per SM give occupancy
// Shared bytes the warps' regions may take: W = this / one warp's, at most 4. All fit AMD's 64 KB a
// block. Measured on the H200 (B=8 Hq=32 Hkv=8 N=32768 d=128, `qattn bench gpu`): e4m3 V fastest at
// 60 KB (W = 3, 4 blocks an SM; budgets 48/60/96/128 KB); q8_0 at 56 KB (W = 3, 4 blocks: 0.236 ms
// against 0.281 at 48 KB, W = 2 and 6 blocks, and 0.258 at 72 KB, W = 4 and 3 blocks); q4_0, whose
// V rows are half as wide, at 48 KB (W = 3, 5 blocks: 0.251 ms against 0.261 at 56 KB, W = 4).
constexpr int warp_budget(DecodeV vf) { return vf == DecodeV::e4m3 ? 60 * 1024 : vf == DecodeV::q8_0 ? 56 * 1024 : 48 * 1024; }
constexpr int kMaxHeads = 8;
constexpr int kStep = 16;                // keys per mma k-step
constexpr int kSpan = 32;                // channels per V span: 2 m-tiles of 16; q8_0 / q4_0 scale groups are whole spans
constexpr int kBRange = 15;              // B below 2^15 < 65504, fp16's largest finite value
constexpr int kPPad = 8;                 // floats after each head's row of P: the rows' banks spread (fast_layout_of)

// Heads a block serves.
QATTN_HD constexpr int heads_per_block(int group_heads) {
  return group_heads % 8 == 0 ? 8 : group_heads % 4 == 0 ? 4 : group_heads % 2 == 0 ? 2 : 1;
}

// ---- shared-memory layout of a split block (byte offsets, 16-byte aligned) ----

struct FastLayout {
  int q = 0, q_scales = 0, round_max = 0, round_sum = 0, round_alpha = 0;  // block-wide
  int warps_at = 0, warp_bytes = 0;                            // warp w's region at warps_at + w * warp_bytes
  // Inside a warp region: `stages` tile buffers, then P and the row-sum terms.
  int k = 0, k_scales = 0, v = 0, v_scales = 0, tile_bytes = 0;  // inside one tile buffer
  int p = 0, terms = 0;
  int p_stride = 0;  // floats from one head's row of P to the next: bc + kPPad (bank spread; fast_layout_of)
  int stages = 1, warps = 1, total = 0;
};

struct FastParams : SplitParams {
  int chunks = 1;        // blocks per (batch, kv head, split): the GQA group / H
  bool p_exact = false;  // every P value is exact in fp16
  int p_exp = 0;         // P < 2^p_exp
  FastLayout lay;
};

// ---- small device helpers ----

template <int N>
QATTN_HD inline float pick(const float (&a)[N], int i) {  // a[i] without a dynamically indexed register array; 0 past N
  float r = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) r = k == i ? a[k] : r;
  return r;
}

// ilogb of a normal float, from its exponent field.
__device__ inline int exponent_of_normal(float x) { return static_cast<int>((__float_as_uint(x) >> 23) & 0xFFu) - 127; }
// 2^e for e in [-126, 127], from its exponent field: ldexpf(1, e) without the library call, and a
// multiply by it is ldexpf(x, e) to the bit.
__device__ inline float pow2_normal(int e) { return __uint_as_float(static_cast<unsigned>(e + 127) << 23); }

// ---- dense tile rows, 16-byte chunks swizzled ----
// Key r of a tile sits in row row_of(r) (rows permuted within groups of 8), and its chunk c at
// chunk c ^ swizzle(row): the rows that share a 128-byte bank line (or, for rows of 128 bytes and
// more, consecutive rows) put a given chunk on distinct banks, so the lanes' reads (one chunk of 8
// consecutive keys a quarter-warp in the scores; 4 bytes of keys 2t + {0, 1, 8, 9} in P V, 2 bytes
// for q4_0) are conflict-free without padding (a bank model of both patterns, d 32-256, e4m3 / q8_0
// / q4_0). The row permutation is for rows of 64 and 32 bytes: there keys 2t (t = 0..3) would all
// sit in one half (64) or one quarter pair (32) of their bank lines, 2-way conflicts in P V.
constexpr int kSwizzleRows = 8;  // row_of and swizzle repeat every 8 rows (warp_copy_rows steps by it)
template <int RowBytes>
QATTN_HD constexpr int swizzle(int row) {
  constexpr int kChunks = RowBytes / 16;
  if constexpr (kChunks >= 8) {
    return row & 7;
  } else {
    return (row / (8 / kChunks)) & (kChunks - 1);
  }
}
template <int RowBytes>
QATTN_HD constexpr int row_of(int key) {
  if constexpr (RowBytes == 64) return key ^ ((key >> 1) & 1);
  if constexpr (RowBytes == 32) return key ^ ((key >> 2) & 1);
  return key;
}
template <int RowBytes>
QATTN_HD constexpr int chunk_offset(int key, int c) {  // byte offset of chunk c of a tile's key
  const int row = row_of<RowBytes>(key);
  return row * RowBytes + 16 * (c ^ swizzle<RowBytes>(row));
}
template <int RowBytes>
constexpr bool repeats_every_swizzle_rows() {
  for (int r = 0; r < 4 * kSwizzleRows; ++r)
    for (int c = 0; c < RowBytes / 16; ++c)
      if (chunk_offset<RowBytes>(r + kSwizzleRows, c) != chunk_offset<RowBytes>(r, c) + kSwizzleRows * RowBytes) return false;
  return true;
}
template <int RowBytes>
constexpr bool xor_chunks_from_first() {  // chunk_offset(r, c) = chunk_offset(r, 0) ^ 16 c
  for (int r = 0; r < 4 * kSwizzleRows; ++r)
    for (int c = 0; c < RowBytes / 16; ++c)
      if (chunk_offset<RowBytes>(r, c) != (chunk_offset<RowBytes>(r, 0) ^ (16 * c))) return false;
  return true;
}
static_assert(xor_chunks_from_first<32>() && xor_chunks_from_first<64>() && xor_chunks_from_first<128>() && xor_chunks_from_first<256>(),
              "a K row's chunk c is one XOR from its first (scores)");
static_assert(repeats_every_swizzle_rows<16>() && repeats_every_swizzle_rows<32>() && repeats_every_swizzle_rows<64>() &&
                  repeats_every_swizzle_rows<128>() && repeats_every_swizzle_rows<256>(),
              "the tile layout repeats every kSwizzleRows rows");

// ---- copies: one warp's tile, K (with its scales) and V (with its scales) as separate groups ----

__device__ inline void warp_copy_run(unsigned char* dst, const std::uint8_t* src, int bytes, int lane) {
  for (int c = lane; 16 * c < bytes; c += kWaveSize) async_copy_16(dst + 16 * c, src + 16L * c, true);
}

// `rows` keys of RowBytes into the tile layout; keys [rows, rows_padded) zero-filled. Lane L copies
// chunk e = L % kParts of keys r0 + kS i (r0 = L / kParts): its sources are contiguous (16 L plus a
// wave's 16 bytes a lane per step) and its destinations repeat every kPeriod steps (the layout
// repeats every kSwizzleRows rows), so a copy costs a few adds rather than the row's and chunk's
// division and swizzle each time (about 15 instructions a 16-byte copy before). Runs of kUnroll
// steps that are all valid go unguarded, each copy one instruction with constant offsets from
// kPeriod running destinations and one running source (the guarded loop took about 13 instructions
// a copy: a sixth of the kernel's instructions, ncu on the H200). A full tile has bc RowBytes / (16
// kWaveSize) steps a lane: at bc = 64 and a wave of 32, rows of 64 bytes and more take the
// unguarded runs; narrower rows (fewer than kUnroll steps) go through the guarded loop.
template <int RowBytes>
__device__ inline void warp_copy_rows(unsigned char* dst, const std::uint8_t* src, int rows, int rows_padded, int lane) {
  constexpr int kParts = RowBytes / 16;
  static_assert(kWaveSize % kParts == 0, "a wave covers whole rows");
  constexpr int kS = kWaveSize / kParts;
  static_assert(kSwizzleRows == 8, "kPeriod below is kSwizzleRows / gcd(kS, kSwizzleRows)");
  constexpr int kPeriod = kS % 8 == 0 ? 1 : (kS % 4 == 0 ? 2 : (kS % 2 == 0 ? 4 : 8));
  constexpr int kStepBytes = kS * RowBytes;  // = 16 kWaveSize
  constexpr int kUnroll = 8;
  static_assert(kUnroll % kPeriod == 0, "an unguarded run starts at the same destination phase");
  const int e = lane % kParts, r0 = lane / kParts;
  int at[kPeriod];  // destination of step q, less q kStepBytes
#pragma unroll
  for (int q = 0; q < kPeriod; ++q) at[q] = chunk_offset<RowBytes>(r0 + kS * q, e) - q * kStepBytes;
  const int steps = rows_padded > r0 ? (rows_padded - r0 + kS - 1) / kS : 0;
  const int valid = rows > r0 ? (rows - r0 + kS - 1) / kS : 0;
  const std::uint8_t* from = src + 16 * lane;
  int i0 = 0;
  {
    unsigned char* d[kPeriod];  // step i0 + q's destination, less q kStepBytes
#pragma unroll
    for (int q = 0; q < kPeriod; ++q) d[q] = dst + at[q];
    const std::uint8_t* s = from;
    for (; i0 + kUnroll <= valid; i0 += kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) async_copy_16(d[u % kPeriod] + u * kStepBytes, s + u * kStepBytes);
#pragma unroll
      for (int q = 0; q < kPeriod; ++q) d[q] += kUnroll * kStepBytes;
      s += kUnroll * kStepBytes;
    }
  }
  for (; i0 < steps; i0 += kPeriod) {
#pragma unroll
    for (int q = 0; q < kPeriod; ++q) {
      const int i = i0 + q;
      if (i < steps) async_copy_16(dst + at[q] + i * kStepBytes, i < valid ? from + static_cast<long>(i) * kStepBytes : src, i < valid);
    }
  }
}

template <int D, class P>
__device__ inline void copy_k(const P& p, unsigned char* buf, long key0, int rows, int lane) {
  warp_copy_rows<D>(buf + p.lay.k, p.k + key0 * D, rows, rows, lane);
  warp_copy_run(buf + p.lay.k_scales, p.k_scales + key0 * p.groups * p.k_scale_bytes, rows * p.groups * p.k_scale_bytes, lane);
}

// V rows past the tile's last key are zeros (they meet P = 0 in the mma: garbage codes could be NaN).
template <DecodeV VF, int D, class P>
__device__ inline void copy_v(const P& p, unsigned char* buf, long key0, int rows, int lane) {
  constexpr int kRow = VF == DecodeV::q4_0 ? D / 2 : D;  // p.v_row: a multiple of 16
  const int padded = (rows + kStep - 1) / kStep * kStep;
  warp_copy_rows<kRow>(buf + p.lay.v, p.v + key0 * kRow, rows, padded, lane);
  if (VF != DecodeV::e4m3) {
    const int vg = p.d / p.v_group;
    warp_copy_run(buf + p.lay.v_scales, p.v_scales + key0 * vg * 2, rows * vg * 2, lane);
  }
}

// ---- scores: one lane per key, all H heads at once ----

// Key j's scale of K group gi (fp16, or fp32 where a scale is not an fp16 value).
__device__ inline float key_scale(const SplitParams& p, const unsigned char* ks, int j, int gi) {
  const unsigned char* s = ks + (j * p.groups + gi) * p.k_scale_bytes;
  return p.k_scale_bytes == 2 ? decode_fp16_bits(*reinterpret_cast<const std::uint16_t*>(s)) : *reinterpret_cast<const float*>(s);
}

// S for keys ja and jb of the tile (each -inf unless visible): the reference's raw_score per
// (head, key) times c, with Q's 16-byte pieces loaded once for both keys. A K scale group's integer
// dots are turned into its float terms once the group's last piece is in, groups in order as the
// reference adds them; a K read is one XOR from the row's first chunk. The pieces (D / 16) run as a
// loop, not unrolled: unrolled they were about 820 of the 2150 instructions (34 KB of code) that a
// q4_0 tile at d = 128 runs through. Rolled (with the nibble widening below), ncu
// on the H200 counted the instruction-cache stall at 0.28 cycles an issued instruction instead of
// 0.70 (q4_0 V; 105.8M warp instructions instead of 101.1M); with the widening and P's padded rows,
// q8_0 V 4-8% faster than before, q4_0 1-4%, e4m3 0-2% (an A/B on one machine: PERF.md, version 6).
template <int D, int H>
__device__ inline void score_two_keys(const SplitParams& p, const FastLayout& lay, const std::int8_t* qs, const float* qsc, const unsigned char* buf,
                                      int ja, int jb, bool va, bool vb, float (&sa)[H], float (&sb)[H]) {
  constexpr int kPieces = D / 16;
  static_assert(kWaveSize % kSwizzleRows == 0, "keys ja and jb = ja + kWaveSize share their chunk order");
  const unsigned char* kbase = buf + lay.k;
  const unsigned char* ks = buf + lay.k_scales;
  const uint4* qv = reinterpret_cast<const uint4*>(qs);
  // ja < bc always; an invalid jb reads ja's row (its score is discarded), so no read leaves the tile.
  const int kb = vb ? jb : ja;
  const int at_a = chunk_offset<D>(ja, 0), to_b = chunk_offset<D>(kb, 0) - at_a;  // to_b: 0 or kWaveSize rows
  const int per_group = p.group / 16;
  int da[H], db[H];
#pragma unroll
  for (int h = 0; h < H; ++h) {
    sa[h] = sb[h] = 0.0f;
    da[h] = db[h] = 0;
  }
  int gi = 0, in_group = 0;
#pragma unroll 1
  for (int v = 0; v < kPieces; ++v) {
    const int at = at_a ^ (16 * v);  // chunk_offset<D>(ja, v) (xor_chunks_from_first)
    const uint4 x = *reinterpret_cast<const uint4*>(kbase + at);
    const uint4 y = *reinterpret_cast<const uint4*>(kbase + at + to_b);
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const uint4 q = qv[h * kPieces + v];
      da[h] = dot4_i8(static_cast<int>(q.x), static_cast<int>(x.x), da[h]);
      db[h] = dot4_i8(static_cast<int>(q.x), static_cast<int>(y.x), db[h]);
      da[h] = dot4_i8(static_cast<int>(q.y), static_cast<int>(x.y), da[h]);
      db[h] = dot4_i8(static_cast<int>(q.y), static_cast<int>(y.y), db[h]);
      da[h] = dot4_i8(static_cast<int>(q.z), static_cast<int>(x.z), da[h]);
      db[h] = dot4_i8(static_cast<int>(q.z), static_cast<int>(y.z), db[h]);
      da[h] = dot4_i8(static_cast<int>(q.w), static_cast<int>(x.w), da[h]);
      db[h] = dot4_i8(static_cast<int>(q.w), static_cast<int>(y.w), db[h]);
    }
    if (++in_group == per_group) {  // the group's last piece (the same for every lane)
      in_group = 0;
      const float ska = key_scale(p, ks, ja, gi), skb = key_scale(p, ks, kb, gi);
#pragma unroll
      for (int h = 0; h < H; ++h) {
        const float sq = qsc[h * p.groups + gi];
        sa[h] = sa[h] + static_cast<float>(da[h]) * (sq * ska);
        sb[h] = sb[h] + static_cast<float>(db[h]) * (sq * skb);
        da[h] = db[h] = 0;
      }
      ++gi;
    }
  }
#pragma unroll
  for (int h = 0; h < H; ++h) {
    sa[h] = va ? sa[h] * p.c : -INFINITY;
    sb[h] = vb ? sb[h] * p.c : -INFINITY;
  }
}

// ---- P V: the warp's (channel, head) accumulators ----
// Lane (g, t) = (lane / 4, lane % 4) holds, for each 32-channel span s, channels 32s + 4g + {0..3}
// of heads 2t and 2t + 1: acc[s][m][r], m the span's m-tile (channels 4g + 2m, 4g + 2m + 1), r the
// mma accumulator (r / 2: which of the two channels, r % 2: which head).

template <DecodeV VF, int D>
QATTN_HD constexpr int v_word_offset(int key, int span, int g) {  // byte offset of channels 32 span + 4g .. +3 of one key
  if constexpr (VF == DecodeV::q4_0) {
    return chunk_offset<D / 2>(key, span) + 2 * g;
  } else {
    return chunk_offset<D>(key, 2 * span + g / 4) + 4 * (g % 4);
  }
}
template <DecodeV VF>
__device__ inline std::uint32_t v_word_at(const unsigned char* at) {
  if constexpr (VF == DecodeV::q4_0) {
    return *reinterpret_cast<const std::uint16_t*>(at);
  } else {
    return *reinterpret_cast<const std::uint32_t*>(at);
  }
}
template <DecodeV VF, int D>
__device__ inline std::uint32_t v_word(const unsigned char* vrows, int key, int span, int g) {
  return v_word_at<VF>(vrows + v_word_offset<VF, D>(key, span, g));
}

#if defined(QATTN_GPU_CUDA)
__device__ inline std::uint32_t sub_f16x2(std::uint32_t a, std::uint32_t b) {  // exact here: integers below 2^11
  std::uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ inline std::uint32_t fma_f16x2(std::uint32_t a, std::uint32_t b, std::uint32_t c) {  // a b + c, rounded once (exact where used: small integers)
  std::uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// The lane's four channels of two keys (words w0, w1) as four fp16 pairs, exactly: out[c] holds
// channel c of w0's key in the low half and of w1's key in the high half (one A register). e4m3 and
// q8_0: one byte permute gathers two channels' pairs, then each pair costs a convert (e4m3) or a
// permute against fp16's 0x64 exponent byte and a subtraction (q8_0: 1024 + code + 128, minus 1152);
// q4_0: one logic op and one subtraction or fma a pair (below).
template <DecodeV VF>
__device__ inline void widen_keys(std::uint32_t w0, std::uint32_t w1, std::uint32_t (&out)[4]) {
  constexpr std::uint32_t kExponents = 0x64646464u;  // fp16 1024's high byte, for the byte permutes below (q8_0)
  // Selectors for __byte_perm(x, kExponents, sel): two bytes of x, each under a 0x64 byte.
  constexpr std::uint32_t kBytes01 = 0x4140u, kBytes23 = 0x4342u;
  if constexpr (VF == DecodeV::e4m3) {
    const std::uint32_t c01 = __byte_perm(w0, w1, 0x5140u), c23 = __byte_perm(w0, w1, 0x7362u);  // [w0.c, w1.c, w0.c+1, w1.c+1]
    widen_e4m3x4(c01, out[0], out[1]);
    widen_e4m3x4(c23, out[2], out[3]);
  } else if constexpr (VF == DecodeV::q8_0) {
    // Sign flipped, the code + 128 is the low byte of fp16 1024 + code + 128 (0x64XX); minus 1152.
    const std::uint32_t x0 = w0 ^ 0x80808080u, x1 = w1 ^ 0x80808080u;
    const std::uint32_t c01 = __byte_perm(x0, x1, 0x5140u), c23 = __byte_perm(x0, x1, 0x7362u);
    out[0] = sub_f16x2(__byte_perm(c01, kExponents, kBytes01), 0x64806480u);
    out[1] = sub_f16x2(__byte_perm(c01, kExponents, kBytes23), 0x64806480u);
    out[2] = sub_f16x2(__byte_perm(c23, kExponents, kBytes01), 0x64806480u);
    out[3] = sub_f16x2(__byte_perm(c23, kExponents, kBytes23), 0x64806480u);
  } else {
    // Nibble c of each 16-bit word (low nibble first): one logic op keeps a nibble with its sign bit
    // flipped (the code + 8) under fp16 1024's exponent, m ? x ^ e : e bit by bit = e ^ (x & m),
    // leaving 1024 + code + 8 (nibbles 0, 2: minus 1032) or 1024 + 16 (code + 8) (nibbles 1, 3:
    // times 2^-4, minus 72), each exact. (Masks, then byte permutes under 0x64, then a subtraction
    // each took three more instructions a call.)
    const std::uint32_t x = __byte_perm(w0, w1, 0x5410u), y = x >> 8;  // nibbles 0, 1 of both words; 2, 3 in y
    constexpr std::uint32_t kLow = 0x000F000Fu, kHigh = 0x00F000F0u, kLowE = 0x64086408u, kHighE = 0x64806480u;
    out[0] = sub_f16x2(kLowE ^ (x & kLow), 0x64086408u);
    out[1] = fma_f16x2(kHighE ^ (x & kHigh), 0x2C002C00u, 0xD480D480u);  // 2^-4, -72
    out[2] = sub_f16x2(kLowE ^ (y & kLow), 0x64086408u);
    out[3] = fma_f16x2(kHighE ^ (y & kHigh), 0x2C002C00u, 0xD480D480u);
  }
}

// x0, x1 as hi + lo fp16 pairs (hi = fp16(x), lo = fp16(x - hi)).
__device__ inline void split_f16x2(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
  hi = pack_f16x2(x0, x1);
  const float2 h = unpack_f16x2(hi);
  lo = pack_f16x2(x0 - h.x, x1 - h.y);
}
#endif

// ---- kernel 1: one split of one (batch, kv head, head chunk) ----
// Its phases as functions: a warp's tile scored (score_tile), the round's running max (fold_round_max),
// P quantized with its row sums (quantize_p), q8_0 / q4_0's V scales prepared (interleave_v_scales),
// the accumulators rescaled (rescale_acc) and O += V^T P (accumulate_pv); l chained through a
// round's tiles (chain_l); the split's partial O, m and l written (write_split).

// S = Q K^T of the warp's tile (keys of this lane), into Pw, and this lane's max per head.
template <int D, int H>
__device__ __forceinline__ void score_tile(const FastParams& p, const FastLayout& lay, const std::int8_t* qs, const float* qsc,
                                           const unsigned char* buf, int bc, int jlo, int jhi, int lane, float* Pw, int ps, float (&tmax)[H]) {
#pragma unroll
  for (int h = 0; h < H; ++h) tmax[h] = -INFINITY;
  for (int ja = lane; ja < bc; ja += 2 * kWaveSize) {
    const int jb = ja + kWaveSize;
    float sa[H], sb[H];
    score_two_keys<D, H>(p, lay, qs, qsc, buf, ja, jb, ja >= jlo && ja < jhi, jb >= jlo && jb < jhi, sa, sb);
#pragma unroll
    for (int h = 0; h < H; ++h) {
      Pw[h * ps + ja] = sa[h];
      tmax[h] = fmaxf(tmax[h], sa[h]);
      if (jb < bc) {
        Pw[h * ps + jb] = sb[h];
        tmax[h] = fmaxf(tmax[h], sb[h]);
      }
    }
  }
}

// l through a round's tiles, as the reference chains it: l = alpha * l + row sum, tile by tile.
template <int H>
__device__ __forceinline__ void chain_l(const float* round_sum, const float* round_alpha, int in_round, float (&l_run)[H]) {
#pragma unroll
  for (int w = 0; w < kMaxWarps; ++w)
    if (w < in_round) {
      float alpha[H], sum[H];
      load_heads(round_alpha + w * kMaxHeads, alpha);
      load_heads(round_sum + w * kMaxHeads, sum);
#pragma unroll
      for (int h = 0; h < H; ++h) l_run[h] = alpha[h] * l_run[h] + sum[h];
    }
}

// The running max before and after this warp's tile (read only by an active warp); m_run after
// the round. max is exact and order-free, so the tiles' maxima are folded in any order: the
// warps' rows unrolled (at most kMaxWarps), each row one vector read (the rolled loop over
// in_round with its per-warp selects took about 130 instructions a tile, ncu on the H200).
template <int H>
__device__ __forceinline__ void fold_round_max(const float* maxima, int in_round, int warp, float (&m_run)[H], float (&m_old)[H], float (&m_new)[H]) {
#pragma unroll
  for (int h = 0; h < H; ++h) m_old[h] = m_run[h];
#pragma unroll
  for (int w = 0; w < kMaxWarps; ++w)
    if (w < in_round) {
      float x[H];
      load_heads(maxima + w * kMaxHeads, x);
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if (w < warp) m_old[h] = fmaxf(m_old[h], x[h]);
        m_run[h] = fmaxf(m_run[h], x[h]);
      }
    }
  float own[H];
  load_heads(maxima + min(warp, in_round - 1) * kMaxHeads, own);
#pragma unroll
  for (int h = 0; h < H; ++h) m_new[h] = fmaxf(m_old[h], own[h]);
}

// P against m_new, quantized, in place of S in Pw; each head's row sum as the reference adds it.
template <int H>
__device__ __forceinline__ void quantize_p(const FastParams& p, float* Pw, int ps, float* Tw, int bc, int lane, const float (&m_new)[H],
                                           float (&row_sum)[H]) {
  float part[H];
#pragma unroll
  for (int h = 0; h < H; ++h) part[h] = 0.0f;
  {
    const PRound pr = p.pr;  // in registers: the loop's shared-memory stores would otherwise reload them
    const float p_mult = p.p_mult;
    const bool quantized_sum = p.denominator_quantized, exact_sum = p.row_sum_exact;
    const auto quantize = [&](auto kind) {  // P's rounding chosen once a tile, not per score
      for (int jj = lane; jj < bc; jj += kWaveSize) {
#pragma unroll
        for (int h = 0; h < H; ++h) {
          const float s = Pw[h * ps + jj];
          const float pf = unnormalized_p(s, m_new[h]);
          const float pq = round_p_as<decltype(kind)::value>(pr, pf * p_mult);
          Pw[h * ps + jj] = pq;
          const float term = quantized_sum ? pq : pf;
          part[h] += term;
          if (!exact_sum) Tw[h * bc + jj] = term;
        }
      }
    };
    with_p_round_kind(pr, quantize);
  }
  if (p.row_sum_exact) {
#pragma unroll
    for (int h = 0; h < H; ++h) row_sum[h] = wave_sum(part[h]);  // every partial sum exact: any order is the in-order sum
  } else {
    wave_sync();
#pragma unroll
    for (int h = 0; h < H; ++h) {
      float s = 0.0f;  // the emulator's order, key by key
      for (int jj = 0; jj < bc; ++jj) s += Tw[h * bc + jj];
      row_sum[h] = s;
    }
  }
}

// q8_0 / q4_0: the tile's V scales, key pairs interleaved in place: scale (2q + k, group g) moves to
// half 2 (q vgroups + g) + k of the same pair's 4 vgroups bytes, so that P V reads a lane's two keys
// of a span as one word, and no region beyond the copy's is needed (a separate scaled copy took 1 KB
// a warp at d = 128: the difference between 10 and 12 warps an SM). Scales of keys from jhi on are
// zeros (past a tile's rows they were never copied). Returns the tile's E, from the largest scale:
// P 2^-E s < 2^kBRange.
template <int kSpans>
__device__ __forceinline__ int interleave_v_scales(const FastParams& p, const FastLayout& lay, unsigned char* buf, int bc, int jhi, int vgroups,
                                                   int lane, int e_prev) {
  std::uint16_t* vs16 = reinterpret_cast<std::uint16_t*>(buf + lay.v_scales);
  std::uint32_t max_bits = 0;  // |s|'s bits: finite fp16 magnitudes order as their bits
  for (int q = lane; 2 * q < bc; q += kWaveSize) {
    std::uint32_t s0[kSpans], s1[kSpans];  // vgroups <= kSpans (v_group a multiple of kSpan)
#pragma unroll
    for (int g = 0; g < kSpans; ++g)
      if (g < vgroups) {
        s0[g] = 2 * q < jhi ? vs16[2 * q * vgroups + g] : 0u;
        s1[g] = 2 * q + 1 < jhi ? vs16[(2 * q + 1) * vgroups + g] : 0u;
        max_bits = max(max_bits, max(s0[g] & 0x7FFFu, s1[g] & 0x7FFFu));
      }
#pragma unroll
    for (int g = 0; g < kSpans; ++g)
      if (g < vgroups) {  // 16-bit stores, as the reads: no access of another type to order against
        vs16[2 * (q * vgroups + g)] = static_cast<std::uint16_t>(s0[g]);
        vs16[2 * (q * vgroups + g) + 1] = static_cast<std::uint16_t>(s1[g]);
      }
  }
  const float smax = wave_max(decode_fp16_bits(max_bits));
  const int e_tile = smax > 0.0f ? exponent_of_normal(smax) + 1 + p.p_exp - kBRange : e_prev;
  wave_sync();
  return e_tile;
}

// This warp's accumulators from its previous tile's max and power of two to this tile's (alpha
// between the warp's tiles times 2^(e_prev - e_tile); that difference is at most 126 in size: E lies
// in [p_exp - 38, p_exp + 1], inside [-126, 103] by plan_fast's bound, or is the initial 0).
template <int H, int kSpans>
__device__ __forceinline__ void rescale_acc(float (&acc)[kSpans][2][4], const float (&m_prev)[H], const float (&m_new)[H], int e_prev, int e_tile,
                                            int t) {
  const float to_tile = pow2_normal(e_prev - e_tile);
  float f[H];
#pragma unroll
  for (int h = 0; h < H; ++h) f[h] = rescale_factor(m_prev[h], m_new[h]) * to_tile;
  const float f0 = pick(f, 2 * t), f1 = pick(f, 2 * t + 1);
#pragma unroll
  for (int s = 0; s < kSpans; ++s)
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      acc[s][m][0] *= f0;
      acc[s][m][1] *= f1;
      acc[s][m][2] *= f0;
      acc[s][m][3] *= f1;
    }
}

// O += V^T P over the tile's keys, 16 at a time (lanes 0..31: a wave of 64 leaves its upper half idle).
template <DecodeV VF, int D, int H>
__device__ __forceinline__ void accumulate_pv(const FastParams& p, const FastLayout& lay, const unsigned char* buf, const float* Pw, int ps,
                                              int jhi, int e_tile, int vgroups, const int (&span_group)[D / kSpan], int g, int t,
                                              float (&acc)[D / kSpan][2][4]) {
  constexpr int kSpans = D / kSpan;
  constexpr bool kQ = VF != DecodeV::e4m3;
  const unsigned char* vrows = buf + lay.v;
  const int steps = (jhi + kStep - 1) / kStep;
  const float p_unit = pow2_normal(-e_tile);  // |e_tile| <= 126 (plan_fast's bound on the multiplier)
  const std::uint32_t* vs_pairs = reinterpret_cast<const std::uint32_t*>(buf + lay.v_scales);  // q8_0 / q4_0, interleaved
#if defined(QATTN_GPU_CUDA)
  const float* prow = Pw + (g < H ? g : 0) * ps;
  const bool head_lane = g < H;
  // The lane's V words of keys 2t and 2t + 1 per span: keys 2t + 8 and 2t + 9 sit kSwizzleRows
  // rows later and step s's keys 16 s rows later at the same offsets (the layout repeats every
  // kSwizzleRows rows), so a step's sixteen reads are constant offsets from eight addresses.
  static_assert(kStep == 2 * kSwizzleRows, "keys 2t + {0, 1, 8, 9} of a step");
  constexpr int kVRow = VF == DecodeV::q4_0 ? D / 2 : D;
  const unsigned char* vk[kSpans][2];
#pragma unroll
  for (int s = 0; s < kSpans; ++s)
#pragma unroll
    for (int k = 0; k < 2; ++k) vk[s][k] = vrows + v_word_offset<VF, D>(2 * t + k, s, g);
  for (int step = 0; step < steps; ++step) {
    const int k0 = step * kStep + 2 * t;
    const int row0 = step * kStep * kVRow;
    float2 pa = head_lane ? *reinterpret_cast<const float2*>(prow + k0) : make_float2(0.0f, 0.0f);
    float2 pb = head_lane ? *reinterpret_cast<const float2*>(prow + k0 + 8) : make_float2(0.0f, 0.0f);
    std::uint32_t bhi[2] = {0, 0}, blo[2] = {0, 0};
    if constexpr (kQ) {  // P 2^-E: exact (a power of two), so P 2^-E s below rounds once, as P (s 2^-E)
      pa = make_float2(pa.x * p_unit, pa.y * p_unit);
      pb = make_float2(pb.x * p_unit, pb.y * p_unit);
    } else {
      if (p.p_exact) {
        bhi[0] = pack_f16x2(pa.x, pa.y);
        bhi[1] = pack_f16x2(pb.x, pb.y);
      } else {
        split_f16x2(pa.x * p_unit, pa.y * p_unit, bhi[0], blo[0]);
        split_f16x2(pb.x * p_unit, pb.y * p_unit, bhi[1], blo[1]);
      }
    }
#pragma unroll
    for (int s = 0; s < kSpans; ++s) {
      const std::uint32_t w0 = v_word_at<VF>(vk[s][0] + row0), w1 = v_word_at<VF>(vk[s][1] + row0);
      const std::uint32_t w8 = v_word_at<VF>(vk[s][0] + row0 + kSwizzleRows * kVRow), w9 = v_word_at<VF>(vk[s][1] + row0 + kSwizzleRows * kVRow);
      if constexpr (kQ) {
        const float2 sa = unpack_f16x2(vs_pairs[(k0 / 2) * vgroups + span_group[s]]);
        const float2 sb = unpack_f16x2(vs_pairs[(k0 / 2 + kStep / 4) * vgroups + span_group[s]]);
        split_f16x2(pa.x * sa.x, pa.y * sa.y, bhi[0], blo[0]);
        split_f16x2(pb.x * sb.x, pb.y * sb.y, bhi[1], blo[1]);
      }
      std::uint32_t v01[4], v89[4];
      widen_keys<VF>(w0, w1, v01);
      widen_keys<VF>(w8, w9, v89);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const std::uint32_t a[4] = {v01[2 * m], v01[2 * m + 1], v89[2 * m], v89[2 * m + 1]};
        mma_f16_m16n8k16(acc[s][m], a, bhi);
        if (kQ || !p.p_exact) mma_f16_m16n8k16(acc[s][m], a, blo);
      }
    }
  }
#else
  // The same sums as fp32 FMAs: lane (g, t) reads every key of its channels and heads.
  const int h0 = 2 * t, h1 = 2 * t + 1;
  for (int j = 0; j < steps * kStep; ++j) {
    const float p0 = h0 < H ? Pw[h0 * ps + j] : 0.0f, p1 = h1 < H ? Pw[h1 * ps + j] : 0.0f;
#pragma unroll
    for (int s = 0; s < kSpans; ++s) {
      const float2 sj = kQ ? unpack_f16x2(vs_pairs[(j / 2) * vgroups + span_group[s]]) : make_float2(1.0f, 1.0f);
      const float unit = j % 2 == 0 ? sj.x : sj.y;
      const float b0 = p0 * p_unit * unit, b1 = p1 * p_unit * unit;
      const std::uint32_t w = v_word<VF, D>(vrows, j, s, g);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float v = VF == DecodeV::e4m3 ? decode_e4m3_bits((w >> (8 * c)) & 0xFFu)
                        : VF == DecodeV::q8_0 ? static_cast<float>(static_cast<std::int8_t>((w >> (8 * c)) & 0xFFu))
                                              : decode_int4_bits((w >> (4 * c)) & 0xFu);
        float* r = acc[s][c / 2] + 2 * (c % 2);
        r[0] = fmaf(v, b0, r[0]);
        r[1] = fmaf(v, b1, r[1]);
      }
    }
  }
#endif
}

// The warps' sums to the split's max, added in warp order through shared memory (the regions, idle
// now), and the split's m and l.
template <DecodeV VF, int D, int H>
__device__ __forceinline__ void write_split(const FastParams& p, float* red, const float (&acc)[D / kSpan][2][4], const float (&m_prev)[H],
                                            int e_prev, const float (&m_final)[H], const float (&l_final)[H], bool pv_lane, int warp,
                                            int g, int t, int tid, int nt, long bkh, long bh0, int split) {
  constexpr int kSpans = D / kSpan;
  const int W = p.lay.warps;
  if (pv_lane) {
    float f[H];
#pragma unroll
    for (int h = 0; h < H; ++h) f[h] = m_prev[h] == -INFINITY ? 0.0f : ldexpf(exp2f(m_prev[h] - m_final[h]), e_prev);
#pragma unroll
    for (int s = 0; s < kSpans; ++s)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int h = 2 * t + r % 2, c = kSpan * s + 4 * g + 2 * m + r / 2;
          if (h < H) red[(warp * H + h) * D + c] = acc[s][m][r] * pick(f, h);
        }
  }
  __syncthreads();
  for (int i = tid; i < H * D; i += nt) {
    float o = 0.0f;
    for (int w = 0; w < W; ++w) o += red[w * H * D + i];
    if constexpr (VF == DecodeV::e4m3) o *= reinterpret_cast<const float*>(p.v_scales)[bkh * D + i % D];
    p.part_o[((bh0 + i / D) * p.splits + split) * D + i % D] = o;
  }
  if (tid < H) {
    const long slot = (bh0 + tid) * p.splits + split;
    p.part_m[slot] = pick(m_final, tid);
    p.part_l[slot] = pick(l_final, tid);
  }
}

template <DecodeV VF, int D, int H>
__global__ void __launch_bounds__(kMaxWarps * kWaveSize) decode_fast_split_kernel(FastParams p) {
  constexpr int kSpans = D / kSpan;
  constexpr bool kQ = VF != DecodeV::e4m3;
  extern __shared__ uint4 shared_vec[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(shared_vec);
  const FastLayout& lay = p.lay;
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid % kWaveSize, warp = tid / kWaveSize, W = lay.warps;
  const int split = blockIdx.x, kh = blockIdx.y / p.chunks, chunk = blockIdx.y - kh * p.chunks, b = blockIdx.z;
  const int G = p.hq / p.hkv, bc = p.bc;
  const long bkh = static_cast<long>(b) * p.hkv + kh;
  const long bh0 = static_cast<long>(b) * p.hq + static_cast<long>(kh) * G + chunk * H;

  std::int8_t* qs = reinterpret_cast<std::int8_t*>(sm + lay.q);   // [H][D]
  float* qsc = reinterpret_cast<float*>(sm + lay.q_scales);         // [H][groups]
  // [2][W][kMaxHeads], by round parity: each tile's max in a round, its row sums, its exp2(m_before - m_after).
  float* const round_max0 = reinterpret_cast<float*>(sm + lay.round_max);
  float* const round_sum0 = reinterpret_cast<float*>(sm + lay.round_sum);
  float* const round_alpha0 = reinterpret_cast<float*>(sm + lay.round_alpha);
  unsigned char* const region = sm + lay.warps_at + warp * lay.warp_bytes;
  float* Pw = reinterpret_cast<float*>(region + lay.p);             // [H][p_stride]: S, then P
  const int ps = lay.p_stride;
  float* Tw = reinterpret_cast<float*>(region + lay.terms);         // [H][bc]: row-sum terms (sums in key order)

  {
    const uint4* src = reinterpret_cast<const uint4*>(p.q + bh0 * (D / 4));
    for (int i = tid; i < H * D / 16; i += nt) reinterpret_cast<uint4*>(qs)[i] = src[i];
    for (int i = tid; i < H * p.groups; i += nt) qsc[i] = p.q_scales[bh0 * p.groups + i];
  }

  const SplitTiles st = split_tiles(p, b, split);
  const int tiles = st.tb - st.ta;
  const int stages = lay.stages;
  // Tile i sits in buffer (i / W) % stages: the prologue fills buffers 0..stages-1 with tiles
  // warp + s W, and tile i + stages W refills tile i's buffer.
  const auto key0 = [&](int i) { return bkh * p.cap + static_cast<long>(st.ta + i) * bc; };
  const auto rows = [&](int i) { return min(st.hi, (st.ta + i) * bc + bc) - (st.ta + i) * bc; };
  // One commit group per call, empty past the split: the waits below count groups.
  const auto issue_k = [&](int i, unsigned char* into) {
    if (i < tiles) copy_k<D>(p, into, key0(i), rows(i), lane);
    async_commit();
  };
  const auto issue_v = [&](int i, unsigned char* into) {
    if (i < tiles) copy_v<VF, D>(p, into, key0(i), rows(i), lane);
    async_commit();
  };
  const auto wait_tile_part = [&] {  // the oldest group: 2 * stages - 1 may stay in flight
    if (stages == 1) {
      async_wait<1>();
    } else {
      async_wait<3>();
    }
    wave_sync();
  };
  for (int s = 0; s < stages; ++s) {
    issue_k(warp + s * W, region + s * lay.tile_bytes);
    issue_v(warp + s * W, region + s * lay.tile_bytes);
  }
  __syncthreads();  // Q

  const int g = lane / 4, t = lane % 4;
  const bool pv_lane = g < 8;  // lanes 0..31 (a wave of 64 leaves its upper half idle in P V)
  float acc[kSpans][2][4];
#pragma unroll
  for (int s = 0; s < kSpans; ++s)
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[s][m][r] = 0.0f;
  float m_prev[H];  // the max this warp's accumulators are relative to
#pragma unroll
  for (int h = 0; h < H; ++h) m_prev[h] = -INFINITY;
  int e_prev = 0;  // and their power of two: true sum = acc * 2^e_prev
  const int e_fixed = p.p_exact ? 0 : p.p_exp - kBRange;  // e4m3 V: B = P * 2^-e_fixed

  // q8_0 / q4_0: V scale groups per key, and the group of each 32-channel span.
  const int vgroups = kQ ? D / p.v_group : 1;
  int span_group[kSpans];
#pragma unroll
  for (int s = 0; s < kSpans; ++s) span_group[s] = kQ ? s * kSpan / p.v_group : 0;

  float m_run[H], l_run[H];  // the split's running max and l after each round (every warp alike)
#pragma unroll
  for (int h = 0; h < H; ++h) {
    m_run[h] = -INFINITY;
    l_run[h] = 0.0f;
  }

  // Rounds of W tiles, tile r0 + w to warp w. One block barrier a round, after the tiles' maxima:
  // each warp then chains l through the previous round's tiles (their row sums were written before
  // it) and takes the running max through its own tile, in tile order. The round arrays alternate by
  // parity, so a warp ahead writes the next round's into the other half while others still read
  // these (with a second barrier a round, after the row sums, warps stalled at barriers 0.35-0.47
  // cycles an issued instruction; with one, 0.39 for q4_0 V: ncu on the H200).
  int parity = 0;
  for (int r0 = 0, slot = 0; r0 < tiles; r0 += W, slot = slot + 1 == stages ? 0 : slot + 1, parity ^= 1) {
    const int i = r0 + warp, in_round = min(W, tiles - r0);
    float* const maxima = round_max0 + parity * W * kMaxHeads;
    float* const sums = round_sum0 + parity * W * kMaxHeads;
    float* const alphas = round_alpha0 + parity * W * kMaxHeads;
    const bool active = i < tiles;
    unsigned char* const buf = region + slot * lay.tile_bytes;
    const int j0 = (st.ta + i) * bc;
    const int jlo = max(st.lo - j0, 0), jhi = min(st.hi - j0, bc);

    if (active) {  // S = Q K^T, the tile's max per head
      wait_tile_part();
      float tmax[H];
      score_tile<D, H>(p, lay, qs, qsc, buf, bc, jlo, jhi, lane, Pw, ps, tmax);
      wave_sync();  // K read by every lane: its buffer may refill
      issue_k(i + stages * W, buf);
#pragma unroll
      for (int h = 0; h < H; ++h) tmax[h] = wave_max(tmax[h]);
      if (lane == 0)
#pragma unroll
        for (int h = 0; h < H; ++h) maxima[warp * kMaxHeads + h] = tmax[h];
    }
    __syncthreads();
    if (r0 > 0) chain_l<H>(round_sum0 + (parity ^ 1) * W * kMaxHeads, round_alpha0 + (parity ^ 1) * W * kMaxHeads, W, l_run);  // every round but the last is full
    float m_old[H], m_new[H];
    fold_round_max<H>(maxima, in_round, warp, m_run, m_old, m_new);
    if (active) {
      float row_sum[H];
      quantize_p<H>(p, Pw, ps, Tw, bc, lane, m_new, row_sum);
      if (lane == 0)
#pragma unroll
        for (int h = 0; h < H; ++h) {
          sums[warp * kMaxHeads + h] = row_sum[h];
          alphas[warp * kMaxHeads + h] = rescale_factor(m_old[h], m_new[h]);
        }
      wait_tile_part();  // V landed; P written by every lane
      int e_tile = e_fixed;
      if constexpr (kQ) e_tile = interleave_v_scales<kSpans>(p, lay, buf, bc, jhi, vgroups, lane, e_prev);
      if (i >= W) rescale_acc<H, kSpans>(acc, m_prev, m_new, e_prev, e_tile, t);  // a previous tile of this warp
#pragma unroll
      for (int h = 0; h < H; ++h) m_prev[h] = m_new[h];
      e_prev = e_tile;
      if (pv_lane) accumulate_pv<VF, D, H>(p, lay, buf, Pw, ps, jhi, e_tile, vgroups, span_group, g, t, acc);
      wave_sync();  // V and P read by every lane: the buffer may refill
      issue_v(i + stages * W, buf);
    }
  }

  async_wait<0>();
  __syncthreads();
  if (tiles > 0) chain_l<H>(round_sum0 + (parity ^ 1) * W * kMaxHeads, round_alpha0 + (parity ^ 1) * W * kMaxHeads, tiles - (tiles - 1) / W * W, l_run);  // the last round's tiles
  write_split<VF, D, H>(p, reinterpret_cast<float*>(sm + lay.warps_at), acc, m_prev, e_prev, m_run, l_run, pv_lane, warp, g, t, tid, nt, bkh, bh0,
                        split);
}

// ---- host side ----

using FastKernel = void (*)(FastParams);

template <DecodeV VF, int D>
FastKernel fast_kernel_for(int h) {
  switch (h) {
    case 8: return decode_fast_split_kernel<VF, D, 8>;
    case 4: return decode_fast_split_kernel<VF, D, 4>;
    case 2: return decode_fast_split_kernel<VF, D, 2>;
    default: return decode_fast_split_kernel<VF, D, 1>;
  }
}

template <DecodeV VF>
FastKernel fast_kernel_for(int d, int h) {
  switch (d) {
    case 32: return fast_kernel_for<VF, 32>(h);
    case 64: return fast_kernel_for<VF, 64>(h);
    case 128: return fast_kernel_for<VF, 128>(h);
    default: return fast_kernel_for<VF, 256>(h);
  }
}

FastKernel fast_kernel_for(DecodeV vf, int d, int h) {
  switch (vf) {
    case DecodeV::e4m3: return fast_kernel_for<DecodeV::e4m3>(d, h);
    case DecodeV::q8_0: return fast_kernel_for<DecodeV::q8_0>(d, h);
    case DecodeV::q4_0: return fast_kernel_for<DecodeV::q4_0>(d, h);
  }
  return nullptr;
}

using FastLaunch = DecodeLaunch<FastParams>;

// One warp's region and the block's layout for `warps` warps and `stages` tile buffers each.
// p_pad: floats of bank padding after each head's row of P (kPPad in a launch; 0 where plan_fast
// sizes W, so that a padding, which changes no result, never changes W, which does).
FastLayout fast_layout_of(int h, int d, int groups, int k_scale_bytes, int bc, DecodeV vf, int v_row, int v_group, bool in_order_sums, int warps,
                          int stages, int p_pad) {
  FastLayout L;
  int off = 0;
  const auto take = [&](int bytes) {
    const int at = off;
    off += up16(bytes);
    return at;
  };
  L.q = take(h * d);
  L.q_scales = take(4 * h * groups);
  L.round_max = take(2 * 4 * warps * kMaxHeads);  // two rounds' worth: by parity
  L.round_sum = take(2 * 4 * warps * kMaxHeads);
  L.round_alpha = take(2 * 4 * warps * kMaxHeads);
  L.warps_at = off;
  int w = 0;
  const auto wtake = [&](int bytes) {
    const int at = w;
    w += up16(bytes);
    return at;
  };
  L.k = wtake(bc * d);  // dense rows, chunks swizzled
  L.k_scales = wtake(bc * groups * k_scale_bytes);
  L.v = wtake(bc * v_row);
  L.v_scales = wtake(vf == DecodeV::e4m3 ? 0 : bc * (d / v_group) * 2);  // bc is even: whole key pairs (the kernel's interleave)
  L.tile_bytes = w;
  w = stages * L.tile_bytes;
  // P's head rows kPPad floats more than bc apart (bc a multiple of 16): P V's float2 reads of keys
  // 2t, 2t + 1 by heads g = 0..3 fall on distinct banks (rows 8 or 24 banks apart; with rows bc
  // apart they were 4-way conflicts at H = 4 when bc is a multiple of 32).
  L.p_stride = bc + p_pad;
  L.p = wtake(4 * h * L.p_stride);
  L.terms = wtake(in_order_sums ? 4 * h * bc : 0);  // only where the row sums run key by key
  L.warp_bytes = std::max(w, up16(4 * h * d));  // after the last tile, a warp's region holds its [H][d] sums
  L.warps = warps;
  L.stages = stages;
  L.total = L.warps_at + warps * L.warp_bytes;
  return L;
}

// Every value of P's format is exact in fp16 (so P is B's single fp16 term for e4m3 V).
bool p_exact_in_fp16(FormatId id) {
  const Format f = format_of(id), half = format_of(FormatId::fp16);
  if (f.bits > 16) return false;
  for (std::uint32_t c = 0; c < (1u << f.bits); ++c) {
    const double v = decode(f, c);
    if (!std::isfinite(v)) continue;
    if (std::fabs(v) > max_finite(half) || decode(half, encode(half, v)) != v) return false;
  }
  return true;
}

FastLaunch plan_fast(int batch, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
                     float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k,
                     const DecodeFastTuning& tuning) {
  require(tuning.stages >= 1 && tuning.stages <= 2, "tuning.stages " + std::to_string(tuning.stages) + " must be 1 or 2", kWho);
  check_merge_threads(tuning.merge_threads, kWho);
  require(dim == 32 || dim == 64 || dim == 128 || dim == 256, "head dim " + std::to_string(dim) + " must be 32, 64, 128 or 256", kWho);
  if (vf != DecodeV::e4m3) {
    require(v_group % kSpan == 0, "V scale group (v_group) " + std::to_string(v_group) + " must be a multiple of 32 (a scale per 16-key x 32-channel mma operand)",
            kWho);
  }
  const int group_heads = q_heads / kv_heads, h = heads_per_block(group_heads);
  FastLaunch l;
  FastParams& p = l.p;
  set_split_params(p, q_heads, kv_heads, capacity, dim, group, k_scales_fp16, vf, v_group, score_factor, p_format, p_multiplier,
                   denominator_quantized, block_k, split_k);
  p.chunks = group_heads / h;
  p.p_exact = p_exact_in_fp16(p_format);
  // B's power of two 2^-E must be a normal float: E = p_exp - 15 (e4m3 V), or p_exp - 14 plus the
  // exponent of the tile's largest fp16 scale, in [-24, 15] (q8_0 / q4_0): E in [p_exp - 38,
  // p_exp + 1], inside [-126, 126] for p_exp = ilogb + 2 in [-88, 102].
  const int lowest = vf == DecodeV::e4m3 ? -100 : -90;
  require(std::ilogb(p_multiplier) >= lowest && std::ilogb(p_multiplier) <= 100,
          "the P multiplier " + std::to_string(p_multiplier) + " must lie in [2^" + std::to_string(lowest) + ", 2^101) for " + decode_v_name(vf) + " V",
          kWho);
  p.p_exp = std::ilogb(p_multiplier) + 2;  // P <= round(multiplier) < 2 * multiplier
  // The warp count is numerics (each warp sums its own tiles): a function of the recipe and the shape
  // (V format, head dim, tile, whether row sums are exact), never of tuning, nor of P's padding.
  const int one = fast_layout_of(h, dim, p.groups, p.k_scale_bytes, block_k, vf, p.v_row, p.v_group, !p.row_sum_exact, 1, 1, 0).warp_bytes;
  const int warps = std::clamp(warp_budget(vf) / one, 1, kMaxWarps);
  const int limit = max_shared_bytes_per_block();
  for (int stages = tuning.stages; stages >= 1; --stages) {
    p.lay = fast_layout_of(h, dim, p.groups, p.k_scale_bytes, block_k, vf, p.v_row, p.v_group, !p.row_sum_exact, warps, stages, kPPad);
    if (p.lay.total <= limit) break;
  }
  require(p.lay.total <= limit,
          "key tile (block_k) " + std::to_string(block_k) + " at head dim " + std::to_string(dim) + " needs " + std::to_string(p.lay.total) +
              " bytes of shared memory for " + std::to_string(warps) + " warps' tiles; the device allows " + std::to_string(limit) +
              " (use a smaller block_k, or flash_decode)",
          kWho);
  l.kernel = fast_kernel_for(vf, dim, h);
  l.threads = warps * wave_size();
  l.grid = dim3(split_k, kv_heads * p.chunks, batch);
  l.merge_threads = tuning.merge_threads;
  l.merge_blocks = batch * q_heads;
  return l;
}

}  // namespace

std::vector<float> flash_decode_fast(const DecodeInputs& in, const DecodeFastTuning& tuning) {
  check_inputs(in, kWho);
  if (in.v_format == DecodeV::e4m3) {
    // The matrix units widen e4m3's NaN codes to NaN, and P = 0 does not cancel it (keys before a
    // window's start are still in the tile); the reference's decoder reads them as 480.
    const Format e4m3 = format_of(FormatId::e4m3);
    for (std::size_t i = 0; i < in.v_codes.size(); ++i) {
      require(!is_nan_code(e4m3, in.v_codes[i]),
              "v_codes[" + std::to_string(i) + "] is an e4m3 NaN code (" + std::to_string(in.v_codes[i]) + "); V must hold finite codes", kWho);
    }
  }
  const PackedDecodeCache pk = pack_decode_cache(in);
  FastLaunch l = plan_fast(in.batch, in.q_heads, in.kv_heads, pk.capacity, in.dim, in.group, pk.k_scales_fp16, in.v_format, in.v_group,
                           in.score_factor, in.p_format, in.p_multiplier, in.denominator_quantized, in.block_k, in.split_k, tuning);
  DeviceBuffers mem;
  const DeviceCache cache = upload_decode_cache(mem, in, pk);
  bind(l.p, cache);
  launch_decode(l);
  check_launch("flash_decode_fast (split + merge kernels)");
  return download(cache.out, static_cast<std::size_t>(in.batch) * in.q_heads * in.dim);
}

DecodeBench bench_flash_decode_fast(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                                    const DecodeFastTuning& tuning) {
  check_bench_shape(batch, q_heads, kv_heads, tokens, dim, split_k, reps, kWho);
  FastLaunch l = plan_fast(batch, q_heads, kv_heads, round_up(tokens, kDecodeCapacityQuantum), dim, kBenchGroup, true, v, kBenchVGroup,
                           bench_score_factor(dim), FormatId::e4m3, kBenchPMultiplier, true, kBenchBlockK, split_k, tuning);
  DecodeBench res = bench_decode_launch(l, v, batch, q_heads, kv_heads, tokens, dim, split_k, reps, "flash_decode_fast (bench)");
  res.fused_pv = true;
  return res;
}

}  // namespace qattn::gpu
