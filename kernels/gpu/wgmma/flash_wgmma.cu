// Warpgroup flash attention (NVIDIA sm_90a, wgmma): blocks of 128 (d > 64) or 192 (d = 64) query
// rows, key tiles of 64 or 128 (the recipe's tiles.block_k: P is rounded against the running max of
// each tile, so the tile is numerics, not tuning).
//   S = Q K^T            s8 wgmma m64n64k32 (int32, exact), fp16 or bf16 m64n64k16 (fp32)
//   s = S ((sq c) sk)     fp32 (the emulator's S (sq sk) c, but for fp32 roundings); masked keys are -inf
//   m' = max(m, rowmax s); alpha = 2^(m - m'); P = round(2^(s - (m' - log2 multiplier)))
//   l = alpha l + rowsum P;  O = alpha O + P V   (e4m3, fp16 or bf16 wgmma, P from registers)
//   out = O vscale / l
// Roles (FlashAttention-3's producer/consumer split): warpgroup 0 is the producer, one thread of
// which issues every copy through the tensor memory accelerator (TMA): the block's Q once, then
// each key tile's K, V^T and K scales into a ring of shared-memory stages, each with a "full"
// mbarrier (the copies' bytes landed) and an "empty" one (every consumer thread is done with it).
// The other warpgroups (two, or three for d = 64: Roles) are the consumers, 64 query rows each,
// sharing every K/V tile: they only wait, multiply and do the softmax, and (where the tile ranges
// allow, below) take turns at the tensor cores, so that one's softmax runs while another's products
// do. The producer gives its registers to the consumers (setmaxnreg).
// Each consumer warp's share of S and O has the mma family's fragment layout (16 rows; per
// 8-column block, rows g and g + 8, columns 2t and 2t + 1), so the softmax below is the mma
// family's, row for row, and a consumer computes what one 64-row block of version 1 computed.
//
// Keys in shared memory. An e4m3 A operand from registers holds, per thread, four consecutive k of
// a row (4t..4t+3 and 16+4t..16+4t+3 of each 32), while S leaves the thread columns 2t, 2t+1 of each
// block of 8. Rather than shuffling P between threads, K's rows are stored permuted within each 32
// keys (in the device copy of K, so that a TMA box lands them so): row c of a tile holds key
// kperm(c), the thread's own S values are exactly its A fragment, and V^T is read in plain key
// order. Sums over keys are unchanged; the emulator's accumulator sees the products of each 32 keys
// together (an instruction's k), whose alignment and sum do not depend on their order. fp16 and
// bf16 P need no permutation (their A fragment is S's layout).
//
// Operand tiles use the no-swizzle K-major layout (wgmma.hpp) in the order TMA boxes of 16 bytes x
// rows write it: all rows' first 16 bytes, then all rows' next 16 bytes, and so on; so core
// matrices adjacent in K are rows x 16 bytes apart and 8-row groups 128 bytes apart.
// Version 2 of the family (kernels/gpu/PERF.md has version 1: one warpgroup per 64 rows, cp.async).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/gpu/wgmma/flash_wgmma.hpp"
#include "kernels/gpu/bench/matrix_bench.hpp"  // bench_flash_*: random inputs
#include "kernels/gpu/common/matrix_host.hpp"
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/fragment_rows.hpp"
#include "kernels/gpu/common/output_format.hpp"
#include "kernels/gpu/common/online_softmax.hpp"
#include "kernels/gpu/common/tma.hpp"
#include "kernels/gpu/common/wgmma.hpp"

namespace qattn::gpu {

namespace {

constexpr int kRowsPerConsumer = 64;                     // one wgmma m64 per consumer
constexpr int kCoreRows = 8;                             // a core matrix: 8 rows x 16 bytes
constexpr int kStepBytes = 32;                           // K bytes one instruction consumes (k32 of 8-bit, k16 of 16-bit)
constexpr int kMaxSharedBytes = 227 * 1024;              // an sm_90 block's dynamic shared memory, opted in
constexpr int kMaxStages = 4;                            // ring depth when shared memory allows
constexpr int kRegisterFile = 65536;                     // 32-bit registers per multiprocessor

// Warpgroups and registers per thread after the split (setmaxnreg), by head dim. The producer issues
// copies from one thread and needs few registers; a consumer holds O (D/2 fp32 per thread), a
// tile's S and P, and for per-tile P V the tile's own sum (another D/2). d <= 64 fits 160 registers
// (version 1 used 144), so three consumers share each tile there; d = 128 needs about 230 (two
// consumers at 240); d = 256 per tile needs more than 240 (O and the tile's sum alone are 256) and
// spills, as version 1 did. Either way one block per multiprocessor. 128-key tiles (BC) double S and
// P (64 more registers): at d = 64 three consumers at 160 spilled (ptxas: 104-112 bytes of stack,
// into O and per tile alike), so d = 64 takes two consumers at 240 there; d = 128 per tile keeps
// 8 (int8 Q K^T) or 24 (16-bit) bytes of stack, into O none.
template <int D, int BC>
struct Roles {
  static constexpr int kConsumers = D <= 64 && BC == 64 ? 3 : 2;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumers == 3 ? 160 : 240;
  static constexpr int kBm = kConsumers * kRowsPerConsumer;  // query rows per block
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
  // setmaxnreg moves registers within the block's own pool, which holds what the block started with:
  // the entry cap (the file over the threads, down to a multiple of 8) per thread. Asking for more
  // would leave setmaxnreg.inc waiting forever.
  static constexpr int kEntryRegisters = kRegisterFile / kThreads / 8 * 8;
  static_assert((kProducerRegisters + kConsumers * kConsumerRegisters) * kWarpgroupThreads <= kEntryRegisters * kThreads,
                "the block's register pool");
};

template <QkType QK>
struct Qk {
  static constexpr int kBytes = QK == QkType::int8 ? 1 : 2;
  using Acc = std::conditional_t<QK == QkType::int8, std::int32_t, float>;
};
template <PvType PV>
struct Pv {
  static constexpr int kBytes = PV == PvType::e4m3 ? 1 : 2;
  static constexpr int kKeysPerStep = kStepBytes / kBytes;  // 32 e4m3 keys or 16 fp16 / bf16 keys per instruction
  // Whether 2^x below fp32's normals (x < -126) can round to a nonzero P: bf16 has fp32's exponent
  // range and subnormals down to 2^-133, so P must not be flushed there (exp2_flushed's argument
  // holds for e4m3 and fp16 only).
  static constexpr bool kSubnormalP = PV == PvType::bf16;
};
static_assert(Pv<PvType::e4m3>::kKeysPerStep == 32 && Pv<PvType::fp16>::kKeysPerStep == 16 && Pv<PvType::bf16>::kKeysPerStep == 16,
              "the instructions' k");

// The key held by row c of a 64-key tile, which is S's column c: within each 32 keys, S column
// c = 8 j' + 2 t + b (j' = 0..3, t = 0..3, b = 0..1) is the A fragment's k = 4 t + 2 j' + b for j' < 2
// and 16 + 4 t + 2 (j' - 2) + b for j' >= 2. Identity for fp16 and bf16 P.
template <PvType PV>
__host__ __device__ constexpr int key_of_column(int c) {
  if constexpr (PV != PvType::e4m3) {
    return c;
  } else {
    const int base = c & ~31, w = c & 31, jp = w / 8, t = (w % 8) / 2, b = w % 2;
    return base + (jp < 2 ? 4 * t + 2 * jp + b : 16 + 4 * t + 2 * (jp - 2) + b);
  }
}
int key_of_column_e4m3(int c) { return key_of_column<PvType::e4m3>(c); }

// 2^x for P (x <= 0) on the special-function unit, subnormal results flushed to zero. exp2f is this
// instruction for x >= -126 and adds only a subnormal path; below that, 2^x times P's multiplier
// (any below 2^100) is under half the smallest e4m3 and fp16 subnormals (2^-9, 2^-24), so P rounds
// to 0 either way: the same codes, about 8 fewer instructions per score.
[[maybe_unused]] __device__ inline float exp2_flushed(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Descriptor of instruction `step` over a tile of `rows` rows in TMA-box order: K bytes
// [32 step, 32 step + 32) are the two 16-byte columns of core matrices starting at 2 step.
[[maybe_unused]] __device__ inline std::uint64_t tile_descriptor(const std::uint8_t* tile, int rows, int step) {
  const int column_bytes = rows * kTmaBoxBytes;
  return wgmma_descriptor(shared_address(tile + step * 2 * column_bytes), column_bytes, kCoreRows * kTmaBoxBytes);
}

struct Params {
  const std::uint8_t *q, *k, *vt;               // Q [Hq][N][d], K [Hkv][Np][d] (rows permuted, key_of_column), V^T [Hkv][d][Np]
  const float *q_scales, *k_scales, *v_scales;  // [Hq][N], [Hkv][Np], [Hkv][d] (or null)
  float* out;                                   // [Hq][N][d]
  std::int32_t* logits;                         // test hook: [16][64] or null
  int* built;                                   // set to 0 by a device pass without wgmma
  int hq, hkv, n, np, window;
  bool causal, denominator_quantized, reverse_blocks;
  float c, p_mult;
  float log2_mult;                              // log2(p_mult), set by launch_one on the host
  float l_mult;                                 // l's factor before O / l: 1, l holds P's multiplier (launch_one)
};

// The TMA maps of Q, K and V^T (tma.hpp), passed by value as a __grid_constant__ parameter.
struct TileMaps {
  CUtensorMap q, k, vt;
};

template <QkType QK, PvType PV, int D, int BC>
struct Smem {
  static constexpr int kBc = BC;
  static constexpr int kQRow = D * Qk<QK>::kBytes;      // one query or key, all channels
  static constexpr int kVRow = kBc * Pv<PV>::kBytes;    // one channel of V^T, all keys of the tile
  static constexpr int kQBytes = Roles<D, BC>::kBm * kQRow;
  static constexpr int kKBytes = kBc * kQRow;
  static constexpr int kVBytes = D * kVRow;
  static constexpr int kScaleBytes = kBc * 4;           // the keys' fp32 scales (int8 QK; reserved, unused, for fp16)
  static constexpr int kTileBytes = kKBytes + kVBytes + (QK == QkType::int8 ? kScaleBytes : 0);  // what one tile's copies deliver
  static constexpr int kStageBytes = kKBytes + kVBytes + kScaleBytes;
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kMaxStages);  // q_full, full[], empty[]: 64-bit mbarriers
  static constexpr int kStages = std::min(kMaxStages, (kMaxSharedBytes - kQBytes - kBarrierBytes) / kStageBytes);
  static_assert(kStages >= 2, "two stages must fit");
  static constexpr int kBarrierOffset = kQBytes + kStages * kStageBytes;  // q_full, full[kStages], empty[kStages]
  static constexpr int kBytes = kBarrierOffset + kBarrierBytes;
};

// The block's shared memory: Q, the ring of key tiles (K, V^T and K's scales per stage) and the
// ring's mbarriers (q_full; full[s]: a stage's copies landed; empty[s]: every consumer released it).
template <QkType QK, PvType PV, int D, int BC>
struct Ring {
  using G = Smem<QK, PV, D, BC>;
  std::uint8_t* smem;
  std::uint64_t *q_full, *full, *empty;
  __device__ explicit Ring(std::uint8_t* s)
      : smem(s), q_full(reinterpret_cast<std::uint64_t*>(s + G::kBarrierOffset)), full(q_full + 1), empty(full + G::kStages) {}
  __device__ std::uint8_t* q() const { return smem; }
  __device__ std::uint8_t* stage(int s) const { return smem + G::kQBytes + s * G::kStageBytes; }
  // Stage `it` of the ring holds tile all.begin + it: waiting for its copies, releasing it. Each
  // thread releases its own reads of the stage (the scales by ld.shared, wgmma's waited for), so
  // that no lane's reads rely on another lane's arrival (racecheck flagged that: PERF.md).
  __device__ void wait_full(int it) const { mbarrier_wait(&full[it % G::kStages], (it / G::kStages) & 1); }
  __device__ void release(int it) const { mbarrier_arrive(&empty[it % G::kStages]); }
};

// ---- producer: one thread issues Q's copies, then each visible key tile's into the ring ----
template <QkType QK, PvType PV, int D, int BC>
__device__ __forceinline__ void produce(const TileMaps& maps, const float* k_scales, int np, const Ring<QK, PV, D, BC>& ring, KeyTiles all, int h,
                                        int kh, int i0) {
  using G = Smem<QK, PV, D, BC>;
  using R = Roles<D, BC>;
  mbarrier_arrive_expect_bytes(ring.q_full, G::kQBytes);  // rows past N arrive as zeros and count too
  for (int x = 0; x < G::kQRow; x += kTmaBoxBytes) tma_load_box(ring.q() + x * R::kBm, &maps.q, x, i0, h, ring.q_full);
  for (int t = all.begin, it = 0; t < all.end; ++t, ++it) {
    const int s = it % G::kStages;
    mbarrier_wait(&ring.empty[s], ((it / G::kStages) & 1) ^ 1);  // the consumers released this stage's last tile
    std::uint8_t* st = ring.stage(s);
    mbarrier_arrive_expect_bytes(&ring.full[s], G::kTileBytes);
    for (int x = 0; x < G::kQRow; x += kTmaBoxBytes) tma_load_box(st + x * BC, &maps.k, x, t * BC, kh, &ring.full[s]);
    for (int x = 0; x < G::kVRow; x += kTmaBoxBytes) tma_load_box(st + G::kKBytes + x * D, &maps.vt, t * G::kVRow + x, 0, kh, &ring.full[s]);
    if constexpr (QK == QkType::int8)
      bulk_load(st + G::kKBytes + G::kVBytes, k_scales + static_cast<long>(kh) * np + t * BC, G::kScaleBytes, &ring.full[s]);
  }
}

// ---- mainloop pieces: S = Q K^T and O += P V on the tensor cores ----
// S = Q K^T of the tile at sk: the instructions chained from zero, one group.
template <QkType QK, int BC, int KQ_STEPS, int BM>
__device__ __forceinline__ void issue_s(const std::uint8_t* my_q, const std::uint8_t* sk, typename Qk<QK>::Acc (&acc)[BC / 2]) {
  using Acc = typename Qk<QK>::Acc;
#pragma unroll
  for (int x = 0; x < BC / 2; ++x) acc[x] = Acc(0);
#pragma unroll
  for (int x = 0; x < BC / 2; ++x) wgmma_fence_operand(acc[x]);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < KQ_STEPS; ++st) {
    const std::uint64_t da = tile_descriptor(my_q, BM, st), db = tile_descriptor(sk, BC, st);
    if constexpr (QK == QkType::int8) wgmma_s8_ss<BC>(acc, da, db);
    else if constexpr (QK == QkType::bf16) wgmma_bf16_ss<BC>(acc, da, db);
    else wgmma_f16_ss<BC>(acc, da, db);
  }
  wgmma_commit_group();
#pragma unroll
  for (int x = 0; x < BC / 2; ++x) wgmma_fence_operand(acc[x]);
}

// acc += P V: the tile's instructions chained (P from registers, V^T at sv), one group.
template <PvType PV, int D, int PV_STEPS>
__device__ __forceinline__ void issue_pv(float (&acc)[D / 2], const std::uint32_t (&pa)[PV_STEPS][4], const std::uint8_t* sv) {
#pragma unroll
  for (int x = 0; x < D / 2; ++x) wgmma_fence_operand(acc[x]);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < PV_STEPS; ++st) {
    const std::uint64_t db = tile_descriptor(sv, D, st);
    if constexpr (PV == PvType::e4m3) wgmma_e4m3_rs<D>(acc, pa[st], db);
    else if constexpr (PV == PvType::bf16) wgmma_bf16_rs<D>(acc, pa[st], db);
    else wgmma_f16_rs<D>(acc, pa[st], db);
  }
  wgmma_commit_group();
}

// ---- softmax pieces ----
// The tile's scores in log2 units, masked keys -inf. Column col of S is key j0 + key_of_column(col).
template <QkType QK, PvType PV, int BC>
__device__ __forceinline__ void tile_scores(const typename Qk<QK>::Acc (&s_acc)[BC / 2], const float (&sqc)[2], const float* kscale, int j0,
                                            const int (&row)[2], int r0, int n, bool causal, int window, int q4, float (&sc)[BC / 2]) {
#pragma unroll
  for (int x = 0; x < BC / 2; ++x) {
    const int jb = x / 4, u = x % 4, jj = key_of_column<PV>(8 * jb + 2 * q4 + (u % 2));
    if constexpr (QK == QkType::int8) {
      sc[x] = static_cast<float>(s_acc[x]) * (sqc[u / 2] * kscale[jj]);
    } else {
      sc[x] = s_acc[x] * sqc[u / 2];
    }
  }
  // Only tiles at an edge of N, the diagonal or the window have masked keys (one branch per tile
  // rather than one per score).
  if (j0 + BC > n || (causal && j0 + BC - 1 > r0) || window > 0) {
#pragma unroll
    for (int x = 0; x < BC / 2; ++x) {
      const int jb = x / 4, u = x % 4, j = j0 + key_of_column<PV>(8 * jb + 2 * q4 + (u % 2));
      if (!key_visible(row[u / 2], j, n, causal, window)) sc[x] = -INFINITY;
    }
  }
}

// Online softmax per row (two rows per lane): the running max m folded (alpha: O's and l's factor),
// P = 2^(s - m) quantized against it into pa, the A fragments of the P V instructions, and l
// updated. e4m3: word w of step st holds 4 keys of row g + 8 (w % 2) from blocks 4 st + 2 (w / 2)
// and + 1 (two codes each); fp16, bf16: word w holds 2 keys of block kBlocksPerStep st + w / 2.
// P's multiplier is a shift of the exponent: 2^(x - m + log2 mult) in place of 2^(x - m) mult, one
// multiply less per score; the rounding of m - log2 mult moves P by about 2^-18 of itself, far
// below an e4m3 or fp16 step (an exact 0 for the multipliers of 1).
template <PvType PV, int BC, int PV_STEPS>
__device__ __forceinline__ void softmax_to_p(const float (&sc)[BC / 2], float (&m)[2], float (&l)[2], float (&alpha)[2], float log2_mult,
                                             bool quant_denom, std::uint32_t (&pa)[PV_STEPS][4]) {
  constexpr int kBlocksPerStep = Pv<PV>::kKeysPerStep / 8;  // 8-column S blocks per P V instruction
  fold_tile_max<BC / 8>(m, alpha, [&](int jb, int c) { return sc[4 * jb + c]; });
  float ps[2] = {0.0f, 0.0f};  // this lane's share of the row sums
  // A row with every key so far masked has m = -inf: subtracting 0 instead keeps 2^(-inf) = 0.
  const float m_sub[2] = {(m[0] == -INFINITY ? 0.0f : m[0]) - log2_mult, (m[1] == -INFINITY ? 0.0f : m[1]) - log2_mult};
#pragma unroll
  for (int jb = 0; jb < BC / 8; ++jb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float pf[2], pq[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = sc[4 * jb + 2 * r + e];
        pf[e] = Pv<PV>::kSubnormalP ? exp2f(x - m_sub[r]) : exp2_flushed(x - m_sub[r]);
      }
      const int st = jb / kBlocksPerStep, in_step = jb % kBlocksPerStep;
      if constexpr (PV == PvType::e4m3) {
        const std::uint16_t codes = pack_e4m3x2(pf[0], pf[1]);
        const float2 back = unpack_f16x2(widen_e4m3x2(codes));
        pq[0] = back.x;
        pq[1] = back.y;
        std::uint32_t& w = pa[st][r + 2 * (in_step / 2)];
        if (in_step % 2 == 0) w = codes;
        else w |= static_cast<std::uint32_t>(codes) << 16;
      } else {
        // Rounded to nearest even, as the emulator rounds P to fp16 or bf16.
        const std::uint32_t packed = PV == PvType::bf16 ? pack_bf16x2(pf[0], pf[1]) : pack_f16x2(pf[0], pf[1]);
        const float2 back = PV == PvType::bf16 ? unpack_bf16x2(packed) : unpack_f16x2(packed);
        pq[0] = back.x;
        pq[1] = back.y;
        pa[st][r + 2 * in_step] = packed;
      }
      ps[r] += quant_denom ? pq[0] + pq[1] : pf[0] + pf[1];
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = alpha[r] * l[r] + ps[r];
  // P's packing is ordinary (non-volatile) code: keep it above the wgmma.fence that must follow it.
#pragma unroll
  for (int st = 0; st < PV_STEPS; ++st)
#pragma unroll
    for (int w = 0; w < 4; ++w) wgmma_fence_operand(pa[st][w]);
}

// ---- tile scheduling between consumers ----
// Turns at the tensor cores (FlashAttention-3's ping-pong). A turn issues products: the first
// tile's S, then per tile its P V and the next tile's S. Consumer c takes turn k after consumer
// c - 1 has issued its turn k (the last consumer hands turn k + 1 back to the first), so that one
// consumer's softmax runs while the next one's products do. Every consumer takes the block's most
// turns, an idle one included. Turns are taken only where no consumer can wait on a stage that a
// consumer blocked on its turn still holds: every consumer has tiles, all from the same first
// one, their last ones at most one apart (full blocks, causal ones with two consumers, and some
// window and ragged ones); and a consumer releases the tiles past its own before its idle turns.
// Elsewhere (a consumer without rows, different first tiles, causal d = 64) the consumers run
// free: the order of turns changes no bit.
constexpr int kTurnThreads = 2 * kWarpgroupThreads;  // the consumer waiting and the one before it
constexpr int kTurnBarrier = 1;                       // consumer c waits on named barrier 1 + c
template <bool ON, int CONSUMERS, int BC>
struct Turns {
  int consumer, max_turns = 0, turn = 0;
  bool on = false;
  __device__ Turns(int c, int i0, int n, bool causal, int window, KeyTiles all) : consumer(c) {
    if constexpr (ON) {
      int first_tile = 0, lo = 1 << 30, hi = 0;
      on = true;
      for (int k = 0; k < CONSUMERS; ++k) {
        const int rc = i0 + k * kRowsPerConsumer;
        const KeyTiles kc = key_tiles(rc, kRowsPerConsumer, n, causal, window, BC);
        const int end = min(kc.end, all.end);
        if (k == 0) first_tile = kc.begin;
        on = on && rc < n && end > kc.begin && kc.begin == first_tile;
        lo = min(lo, end);
        hi = max(hi, end);
      }
      on = on && hi - lo <= 1;
      max_turns = hi - first_tile + 1;
      if (on && consumer == CONSUMERS - 1) named_barrier_arrive(kTurnBarrier, kTurnThreads);
    }
  }
  __device__ void take() {
    if constexpr (ON)
      if (on) named_barrier_sync(kTurnBarrier + consumer, kTurnThreads);
  }
  __device__ void pass() {
    if constexpr (ON) {
      if (on && (consumer != CONSUMERS - 1 || turn != max_turns - 1)) named_barrier_arrive(kTurnBarrier + (consumer + 1) % CONSUMERS, kTurnThreads);
      ++turn;
    }
  }
  // The turns past this consumer's last tile.
  __device__ void finish() {
    if constexpr (ON)
      while (on && turn < max_turns) {
        take();
        pass();
      }
  }
};

// The kernel: a producer warpgroup fills the ring (produce); each consumer warpgroup runs, per key
// tile, S = Q K^T (issue_s), the online softmax to P (tile_scores, softmax_to_p), O = alpha O + P V
// (issue_pv), in turns with the other consumers (Turns), then stores O / l (store_rows).
// The LOGITS instantiation (a test hook) returns after the first product: the softmax below is
// unreachable there by design (nvcc's warning 128).
#pragma nv_diag_suppress 128
// QUANT_DENOM (p.denominator_quantized as a template parameter, so that the softmax has no branch per
// score pair; int8 Q K^T only): l sums P as rounded, or 2^(s - m') before rounding. The 16-bit Q K^T
// instantiations read the flag at run time: as a template parameter ptxas serialized their into-O
// wgmma (C7518, CUDA 13.0).
template <QkType QK, PvType PV, int D, int BC, bool PER_TILE, bool LOGITS, bool QUANT_DENOM>
__global__ void __launch_bounds__(Roles<D, BC>::kThreads, 1) flash_wgmma_kernel(const __grid_constant__ TileMaps maps, const Params p) {
  if constexpr (!kWgmmaCompiled) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) *p.built = 0;
    return;
  } else {
    using G = Smem<QK, PV, D, BC>;
    using R = Roles<D, BC>;
    using Acc = typename Qk<QK>::Acc;
    constexpr int kQkSteps = G::kQRow / kStepBytes;            // instructions per S tile
    constexpr int kPvSteps = BC / Pv<PV>::kKeysPerStep;        // instructions per P V tile
    extern __shared__ __align__(1024) std::uint8_t smem[];
    const Ring<QK, PV, D, BC> ring(smem);

    const int block = p.reverse_blocks ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int h = blockIdx.y, kh = h / (p.hq / p.hkv);
    const int i0 = block * R::kBm;
    KeyTiles all = key_tiles(i0, R::kBm, p.n, p.causal, p.window, BC);  // every tile some row of the block sees
    if constexpr (LOGITS) all.end = min(all.end, all.begin + 1);

    if (threadIdx.x == 0) {
      mbarrier_init(ring.q_full, 1);
      for (int s = 0; s < G::kStages; ++s) {
        mbarrier_init(&ring.full[s], 1);                                  // the producer's arrival, with the copies' bytes
        mbarrier_init(&ring.empty[s], R::kConsumers * kWarpgroupThreads);  // every consumer thread's arrival
      }
      mbarrier_init_fence();
    }
    __syncthreads();

    const int warpgroup = threadIdx.x / kWarpgroupThreads;
    if (warpgroup == 0) {
      warpgroup_registers_down<R::kProducerRegisters>();
      if (threadIdx.x == 0) produce(maps, p.k_scales, p.np, ring, all, h, kh, i0);
      return;
    }

    // ---- consumers ----
    warpgroup_registers_up<R::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32, g = lane / 4, q4 = lane % 4;
    const int r0 = i0 + consumer * kRowsPerConsumer;  // this consumer's first row
    const int row[2] = {r0 + warp * 16 + g, r0 + warp * 16 + g + 8};
    // int8: each row's scale times c, once, so that a score takes two multiplies (S (sq c) sk): one
    // fp32 rounding away from the emulator's S (sq sk) c, far below P's (the tests' 30 dB rule).
    float sqc[2] = {p.c, p.c};
    if constexpr (QK == QkType::int8)
#pragma unroll
      for (int r = 0; r < 2; ++r) sqc[r] = row[r] < p.n ? p.q_scales[static_cast<long>(h) * p.n + row[r]] * p.c : 0.0f;
    const float log2_mult = p.log2_mult;
    const bool kQuantDenom = QK == QkType::int8 ? QUANT_DENOM : p.denominator_quantized;
    KeyTiles mine = key_tiles(r0, kRowsPerConsumer, p.n, p.causal, p.window, BC);  // version 1's tiles for these rows
    if (r0 >= p.n) mine.end = mine.begin;  // a consumer of the last block may have no rows
    const std::uint8_t* my_q = ring.q() + consumer * kRowsPerConsumer * kTmaBoxBytes;

    float o[D / 2];
#pragma unroll
    for (int x = 0; x < D / 2; ++x) o[x] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    mbarrier_wait(ring.q_full, 0);
    mine.end = min(mine.end, all.end);  // (the logits hook's producer copies one tile)
    int it = 0;
    for (int t = all.begin; t < min(mine.begin, all.end); ++t, ++it) {  // tiles only the other consumers see
      ring.wait_full(it);
      ring.release(it);
    }
    Turns<!LOGITS && (R::kConsumers > 1), R::kConsumers, BC> turns(consumer, i0, p.n, p.causal, p.window, all);
    Acc s_acc[BC / 2];
    // The first tile's S. With a wgmma or its wait under a branch here, ptxas (CUDA 13.0) serialized
    // wgmma (its warnings C7514-C7518, by variant), so a consumer without tiles issues one too
    // (discarded), on a stage that holds a tile and is not refilled while it reads. The products of
    // a tile are issued together with the next tile's S: the loop waits only for P V there, and S
    // runs meanwhile.
    const bool have = mine.begin < mine.end;
    {
      // Before `it` only when every tile was released above: then no refill follows.
      const int first_it = min(it, all.end - all.begin - 1);
      ring.wait_full(first_it);
      turns.take();
      issue_s<QK, BC, kQkSteps, R::kBm>(my_q, ring.stage(first_it % G::kStages), s_acc);
      turns.pass();
    }
    for (int t = mine.begin; t < mine.end; ++t, ++it) {
      const std::uint8_t* sv = ring.stage(it % G::kStages) + G::kKBytes;
      const float* kscale = reinterpret_cast<const float*>(sv + G::kVBytes);
      wgmma_wait_group<0>();  // this tile's S
#pragma unroll
      for (int x = 0; x < BC / 2; ++x) wgmma_fence_operand(s_acc[x]);

      if constexpr (LOGITS) {
        if (block == 0 && consumer == 0 && warp == 0)
#pragma unroll
          for (int x = 0; x < BC / 2; ++x) {
            const int jb = x / 4, u = x % 4, col = 8 * jb + 2 * q4 + (u % 2);
            std::int32_t bits;
            std::memcpy(&bits, &s_acc[x], 4);
            p.logits[(g + 8 * (u / 2)) * BC + key_of_column<PV>(col)] = bits;
          }
        return;  // the producer copied this one tile only
      }

      float sc[BC / 2], alpha[2];
      std::uint32_t pa[kPvSteps][4];
      tile_scores<QK, PV, BC>(s_acc, sqc, kscale, t * BC, row, r0, p.n, p.causal, p.window, q4, sc);
      softmax_to_p<PV, BC, kPvSteps>(sc, m, l, alpha, log2_mult, kQuantDenom, pa);

      // O = alpha O + P V. Once a row's max settles alpha is exactly 1 and x * 1 = x, so a warp
      // whose rows all have alpha = 1 skips the multiplies and changes no bit.
      if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int x = 0; x < D / 2; ++x) o[x] *= alpha[(x % 4) / 2];
      }
      // acc += P V (into the tile's own sum, or O itself), then the next tile's S, in one turn; P V
      // is waited for, S left in flight. The last tile issues S once more on its own stage
      // (discarded), not under a branch (above).
      float tile[D / 2];
      float(&acc)[D / 2] = PER_TILE ? tile : o;
      if constexpr (PER_TILE)
#pragma unroll
        for (int x = 0; x < D / 2; ++x) tile[x] = 0.0f;
      const bool next = t + 1 < mine.end;
      turns.take();
      issue_pv<PV, D, kPvSteps>(acc, pa, sv);
      if (next) ring.wait_full(it + 1);
      issue_s<QK, BC, kQkSteps, R::kBm>(my_q, ring.stage((next ? it + 1 : it) % G::kStages), s_acc);
      turns.pass();
      wgmma_wait_group<1>();
#pragma unroll
      for (int x = 0; x < D / 2; ++x) wgmma_fence_operand(acc[x]);
      if constexpr (PER_TILE)
#pragma unroll
        for (int x = 0; x < D / 2; ++x) o[x] += tile[x];  // one fp32 add per tile (nearest even)
      if (next) ring.release(it);  // this tile's products were waited for; the last tile's stage after its extra S
    }
    wgmma_wait_group<0>();
    if (have) ring.release(it - 1);
    for (; it < all.end - all.begin; ++it) {  // tiles after this consumer's last
      ring.wait_full(it);
      ring.release(it);
    }
    turns.finish();
    if constexpr (!LOGITS) {
      // l sums P with its multiplier in either form (the multiplier is in the exponent above), so
      // l_mult is 1; passed at run time: with the constant, ptxas serialized the 16-bit Q K^T into-O
      // instantiations' wgmma (C7518).
      store_rows<D>(p.out + static_cast<long>(h) * p.n * D, p.v_scales ? p.v_scales + kh * D : nullptr, p.n, row, l,
                    p.denominator_quantized, p.l_mult, q4, [&](int nc, int u) { return o[4 * nc + u]; });
    }
  }
}

#pragma nv_diag_default 128

// The maps of Params' arrays: Q boxes of a block's rows (rows past N zero), K boxes of one tile, V^T boxes
// of all D channels.
template <QkType QK, PvType PV, int D, int BC>
TileMaps tile_maps(const Params& p) {
  using G = Smem<QK, PV, D, BC>;
  return {make_tile_map(p.q, G::kQRow, p.n, p.hq, Roles<D, BC>::kBm, "flash_wgmma (Q)"), make_tile_map(p.k, G::kQRow, p.np, p.hkv, BC, "flash_wgmma (K)"),
          make_tile_map(p.vt, p.np * Pv<PV>::kBytes, D, p.hkv, D, "flash_wgmma (V^T)")};
}

template <QkType QK, PvType PV, int D, int BC, bool PER_TILE, bool LOGITS, bool QUANT_DENOM>
void launch_one(const Params& p) {
  using G = Smem<QK, PV, D, BC>;
  using R = Roles<D, BC>;
  // (Also what keeps a device pass without wgmma, which drops the kernel's body, from warning that
  // it is unused.)
  static_assert(G::kTileBytes <= G::kStageBytes, "a tile's copies fit its stage");
  const int blocks = LOGITS ? 1 : (p.n + R::kBm - 1) / R::kBm;
  auto kernel = flash_wgmma_kernel<QK, PV, D, BC, PER_TILE, LOGITS, QUANT_DENOM>;
  const int shared = G::kBytes;
  static const bool allowed = (allow_shared_bytes(kernel, shared), true);  // once per instantiation
  (void)allowed;
  // A map is a function of the arrays' addresses and shapes alone (the rest is this instantiation's),
  // so the last one is reused while those match: the same map, and no host-side encoding inside a
  // benchmark's timed launches.
  struct MapKey {
    const void *q, *k, *vt;
    int n, np, hq, hkv;
    bool operator==(const MapKey&) const = default;
  };
  static thread_local std::optional<std::pair<MapKey, TileMaps>> last;
  const MapKey key{p.q, p.k, p.vt, p.n, p.np, p.hq, p.hkv};
  if (!last || !(last->first == key)) last.emplace(key, tile_maps<QK, PV, D, BC>(p));
  Params q = p;
  q.log2_mult = std::log2(p.p_mult);
  q.l_mult = 1.0f;
  kernel<<<dim3(blocks, p.hq), R::kThreads, shared>>>(last->second, q);
}

template <QkType QK, PvType PV, int D, int BC, bool LOGITS>
void launch_acc(const Params& p, WgmmaPvAcc acc) {
  const bool per_tile = acc == WgmmaPvAcc::per_tile;
  // The logits hook stops before the softmax, and 16-bit Q K^T reads the flag at run time: one
  // instantiation is enough there.
  if constexpr (LOGITS || QK != QkType::int8) {
    return per_tile ? launch_one<QK, PV, D, BC, true, LOGITS, true>(p) : launch_one<QK, PV, D, BC, false, LOGITS, true>(p);
  } else {
    if (p.denominator_quantized)
      return per_tile ? launch_one<QK, PV, D, BC, true, false, true>(p) : launch_one<QK, PV, D, BC, false, false, true>(p);
    return per_tile ? launch_one<QK, PV, D, BC, true, false, false>(p) : launch_one<QK, PV, D, BC, false, false, false>(p);
  }
}

// 128-key tiles are instantiated for e4m3 P V at d = 64 and 128 only (dispatch.cpp refuses the rest),
// and the logits hook reads one 64-key tile.
template <QkType QK, PvType PV, bool LOGITS>
void launch_dim(const Params& p, int dim, int key_tile, WgmmaPvAcc acc) {
  if (key_tile == 128) {
    if constexpr (PV == PvType::e4m3 && !LOGITS) {
      if (dim == 64) return launch_acc<QK, PV, 64, 128, false>(p, acc);
      if (dim == 128) return launch_acc<QK, PV, 128, 128, false>(p, acc);
    }
    throw std::invalid_argument("flash_wgmma: 128-key tiles take e4m3 P V at head dims 64 and 128, got d " + std::to_string(dim) +
                                (PV == PvType::e4m3 ? "" : " with 16-bit P V"));
  }
  if (key_tile != kMmaKeyTile) throw std::invalid_argument("flash_wgmma: key tile must be 64 or 128, got " + std::to_string(key_tile));
  switch (dim) {
    case 64: return launch_acc<QK, PV, 64, kMmaKeyTile, LOGITS>(p, acc);
    case 128: return launch_acc<QK, PV, 128, kMmaKeyTile, LOGITS>(p, acc);
    case 256: return launch_acc<QK, PV, 256, kMmaKeyTile, LOGITS>(p, acc);
    default: throw std::invalid_argument("flash_wgmma: head dim must be 64, 128 or 256, got " + std::to_string(dim));
  }
}

// The QK/PV pairs instantiated: every int8/fp16 pair, and bf16 with bf16, int8 or e4m3 (fp16 with
// bf16 would be two more instantiations that no recipe needs: dispatch.cpp refuses them).
template <bool LOGITS>
void launch(QkType qk, PvType pv, const Params& p, int dim, int key_tile, WgmmaPvAcc acc) {
  if (qk == QkType::int8 && pv == PvType::e4m3) return launch_dim<QkType::int8, PvType::e4m3, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::fp16 && pv == PvType::e4m3) return launch_dim<QkType::fp16, PvType::e4m3, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::int8 && pv == PvType::fp16) return launch_dim<QkType::int8, PvType::fp16, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::fp16 && pv == PvType::fp16) return launch_dim<QkType::fp16, PvType::fp16, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::bf16 && pv == PvType::bf16) return launch_dim<QkType::bf16, PvType::bf16, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::int8 && pv == PvType::bf16) return launch_dim<QkType::int8, PvType::bf16, LOGITS>(p, dim, key_tile, acc);
  if (qk == QkType::bf16 && pv == PvType::e4m3) return launch_dim<QkType::bf16, PvType::e4m3, LOGITS>(p, dim, key_tile, acc);
  throw std::invalid_argument("flash_wgmma: fp16 and bf16 do not mix: QK^T and PV must not be one fp16, the other bf16");
}

// V^T's element: the P V instruction's B operand type.
VtElement vt_element(PvType pv) { return pv == PvType::e4m3 ? VtElement::e4m3_code : pv == PvType::bf16 ? VtElement::bf16 : VtElement::fp16; }

// After a launch: the CUDA error, then whether the device code held wgmma at all.
void check_built(const int* built, const char* what) {
  check_launch(what);
  if (download(built, 1)[0] != 1)
    throw std::runtime_error(std::string(what) + ": this build holds no sm_90a code (wgmma); configure with "
                             "CMAKE_CUDA_ARCHITECTURES including 90a");
}

// Device copies of MmaInputs in the layouts of Params (common/matrix_host.hpp): e4m3 V^T as e4m3 codes (the
// instruction's operand), fp16 V^T as fp16, bf16 as bf16.
struct DeviceInputs : MatrixDeviceInputs<Params> {
  explicit DeviceInputs(const MmaInputs& in)
      : MatrixDeviceInputs<Params>(in, vt_element(in.pv), "flash_wgmma",
                                   in.pv == PvType::e4m3 ? key_of_column_e4m3 : nullptr) {
    p.built = mem.upload(std::vector<int>{1});
  }
};

}  // namespace

std::vector<float> flash_wgmma(const MmaInputs& in, WgmmaPvAcc pv_acc) {
  DeviceInputs dev(in);
  const std::size_t count = static_cast<std::size_t>(in.q_heads) * in.tokens * in.dim;
  float* out = dev.mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  dev.p.out = out;
  launch<false>(in.qk, in.pv, dev.p, in.dim, in.key_tile, pv_acc);
  check_built(dev.p.built, "flash_wgmma_kernel");
  round_output(out, count, in.out);
  return pick_rows(download(out, count), in.q_heads, in.tokens, in.dim, in.rows);
}

std::vector<std::int32_t> wgmma_logits(const MmaInputs& in, int h) {
  MmaInputs one = in;
  one.causal = false;
  one.window = 0;
  DeviceInputs dev(one);
  dev.p.reverse_blocks = false;
  std::int32_t* logits = dev.mem.alloc<std::int32_t>(16 * kMmaKeyTile);
  fill_bytes(logits, 0xFF, sizeof(std::int32_t) * 16 * kMmaKeyTile);
  dev.p.logits = logits;
  // One block of head h: its Q and its K head selected by offsetting the pointers.
  const long qk_bytes = qk_element_bytes(in.qk), v_bytes = in.pv == PvType::e4m3 ? 1 : 2;
  const int kh = h / (in.q_heads / in.kv_heads);
  dev.p.q += h * static_cast<long>(in.tokens) * in.dim * qk_bytes;
  dev.p.k += kh * static_cast<long>(dev.p.np) * in.dim * qk_bytes;
  if (dev.p.q_scales) dev.p.q_scales += static_cast<long>(h) * in.tokens;
  if (dev.p.k_scales) dev.p.k_scales += static_cast<long>(kh) * dev.p.np;
  dev.p.vt += static_cast<long>(kh) * in.dim * dev.p.np * v_bytes;
  dev.p.hq = dev.p.hkv = 1;
  launch<true>(in.qk, in.pv, dev.p, in.dim, kMmaKeyTile, WgmmaPvAcc::per_tile);
  check_built(dev.p.built, "flash_wgmma_kernel (logits)");
  return download(logits, 16 * kMmaKeyTile);
}

double bench_flash_wgmma(QkType qk, PvType pv, WgmmaPvAcc pv_acc, bool denominator_quantized, int key_tile, int batch, int q_heads,
                         int kv_heads, int tokens, int dim, bool causal, int reps) {
  DeviceBuffers mem;
  Params p{};
  const int hq = batch * q_heads, hkv = batch * kv_heads, n = tokens;
  const RandomMmaDevice dev = random_mma_device(mem, qk, pv, vt_element(pv), hq, hkv, n, dim);
  set_bench(p, dev, pv, hq, hkv, n, dim, causal);
  p.denominator_quantized = denominator_quantized;
  p.built = mem.upload(std::vector<int>{1});
  return median_launch_ms(
      reps, [&] { launch<false>(qk, pv, p, dim, key_tile, pv_acc); }, [&] { check_built(p.built, "flash_wgmma_kernel (warm-up)"); }, "flash_wgmma_kernel (bench)");
}

}  // namespace qattn::gpu
