// Matrix-instruction flash attention (NVIDIA mma.sync), one warp per 16 query rows, key tiles of 64:
//   S = Q K^T            int8 m16n8k32 (int32, exact) or fp16 m16n8k16 (fp32)
//   s = S (sq sk) c       fp32, in the emulator's order; masked keys are -inf
//   m' = max(m, rowmax s); alpha = 2^(m - m'); P = round(2^(s - m') * multiplier)
//   l = alpha l + rowsum P;  O = alpha O + P V   (fp16 m16n8k16 HMMAs)
//   out = O vscale / l
// e4m3 P and V are computed as the H200 computes an e4m3 mma.sync (measured by
// tests/gpu/test_mma_accumulator.cpp): two fp16 HMMAs over 16 keys each, the first from zero, the
// second continuing it, then one fp32 add into O (model h200_e4m3_mma). The kernel issues those HMMAs
// itself: P's e4m3 values and V's (widened to fp16 once, in memory; every e4m3 value is an fp16
// value) go in unchanged, and no warp converts V again. fp16 P and V accumulate straight into O
// (model h200_hmma).
// Tuning (warps per block) is separate from numerics: every row's arithmetic is the same whatever
// its block (a test proves it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/bench/matrix_bench.hpp"  // bench_flash_*: random inputs
#include "kernels/gpu/common/matrix_host.hpp"
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/fragment_rows.hpp"
#include "kernels/gpu/common/output_format.hpp"
#include "kernels/gpu/common/online_softmax.hpp"
#include "kernels/gpu/prepare/prepare.hpp"

namespace qattn::gpu {

namespace {

constexpr int kBc = kMmaKeyTile;
constexpr int kPad = 16;  // bytes added to each shared row: fragment loads of 8 rows x 4 lanes hit 32 banks

template <QkType T>
struct QkTraits;
template <>
struct QkTraits<QkType::int8> {
  using Acc = int;
  static constexpr int kBytes = 1;
};
template <>
struct QkTraits<QkType::fp16> {
  using Acc = float;
  static constexpr int kBytes = 2;
};

template <PvType T>
struct PvTraits;
template <>
struct PvTraits<PvType::e4m3> {
  static constexpr int kBytes = 2;  // e4m3 values widened to fp16
  static constexpr int kKeysPerMma = 16;
};
template <>
struct PvTraits<PvType::fp16> {
  static constexpr int kBytes = 2;
  static constexpr int kKeysPerMma = 16;
};

struct Params {
  const std::uint8_t *q, *k, *vt;            // byte views of the layouts in flash_mma.hpp
  const float *q_scales, *k_scales, *v_scales;  // k_scales [Hkv][Np]
  float* out;                                // [Hq][N][d]
  std::int32_t* logits;                      // test hook: [16][64] or null
  int hq, hkv, n, np, window;
  bool causal, denominator_quantized, reverse_blocks;
  float c, p_mult;
};

// Shared-memory geometry of one pipeline stage.
template <QkType QK, PvType PV, int D>
struct Stage {
  static constexpr int kKRow = D * QkTraits<QK>::kBytes + kPad;   // one key, all channels
  static constexpr int kVRow = kBc * PvTraits<PV>::kBytes + kPad;  // one channel, all keys of the tile
  static constexpr int kKBytes = kBc * kKRow;
  static constexpr int kVBytes = D * kVRow;
  static constexpr int kScaleBytes = kBc * 4;
  static constexpr int kBytes = kKBytes + kVBytes + kScaleBytes;
};

__device__ inline std::uint32_t load_u32(const std::uint8_t* p) { return *reinterpret_cast<const std::uint32_t*>(p); }

template <QkType QK, PvType PV, int D, int WARPS>
__device__ inline void load_stage(const Params& p, std::uint8_t* stage, int kh, int j0) {
  using G = Stage<QK, PV, D>;
  constexpr int kRowBytes = D * QkTraits<QK>::kBytes, kKChunks = kBc * kRowBytes / 16;
  constexpr int kTileBytes = kBc * PvTraits<PV>::kBytes, kVChunks = D * kTileBytes / 16;
  const int t = threadIdx.x;
  const std::uint8_t* kg = p.k + (static_cast<long>(kh) * p.np + j0) * kRowBytes;
  for (int u = t; u < kKChunks; u += WARPS * 32) {
    const int r = u / (kRowBytes / 16), c16 = u % (kRowBytes / 16);
    async_copy_16(stage + r * G::kKRow + c16 * 16, kg + static_cast<long>(r) * kRowBytes + c16 * 16, true);
  }
  const std::uint8_t* vg = p.vt + (static_cast<long>(kh) * D * p.np + j0) * PvTraits<PV>::kBytes;
  for (int u = t; u < kVChunks; u += WARPS * 32) {
    const int r = u / (kTileBytes / 16), c16 = u % (kTileBytes / 16);
    async_copy_16(stage + G::kKBytes + r * G::kVRow + c16 * 16,
                  vg + static_cast<long>(r) * p.np * PvTraits<PV>::kBytes + c16 * 16, true);
  }
  if constexpr (QK == QkType::int8) {
    const float* sg = p.k_scales + static_cast<long>(kh) * p.np + j0;
    if (t < kBc / 4) async_copy_16(stage + G::kKBytes + G::kVBytes + t * 16, sg + 4 * t, true);
  }
}

// Blocks per SM the register budget must allow (a tuning choice: it never changes a result). The
// compiler's free choice left 2 blocks of 4 warps per SM; asking for 3 (168 registers, a few
// spilled) made int8 QK^T at d = 128 7-12% faster on the H200, while fp16 QK^T ran slower; d = 256
// and 8-warp blocks would spill heavily.
template <QkType QK, int D, int WARPS>
inline constexpr int kMinBlocksPerSm = QK == QkType::int8 && D <= 128 && WARPS == 4 ? 3 : 1;

// Online softmax per row (two rows per lane): the running max m folded (alpha: O's and l's factor),
// P = 2^(s - m) times its multiplier quantized against it into pa, the A fragments of the P V
// product (P as two fp16 per word: e4m3 values are fp16 values), and l updated.
template <PvType PV, int PV_CHUNKS, int TILES_PER_PV_CHUNK>
__device__ __forceinline__ void softmax_to_p(const float (&s)[8][4], float (&m)[2], float (&l)[2], float (&alpha)[2], float p_mult,
                                             bool denominator_quantized, std::uint32_t (&pa)[PV_CHUNKS][4]) {
  fold_tile_max<8>(m, alpha, [&](int nt, int c) { return s[nt][c]; });
  float ps[2] = {0.0f, 0.0f};  // this lane's share of the rows' sums
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float pf[2], pq[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = s[nt][2 * r + e];
        pf[e] = unnormalized_p(x, m[r]);
      }
      std::uint32_t packed;
      if constexpr (PV == PvType::e4m3) {
        packed = widen_e4m3x2(pack_e4m3x2(pf[0] * p_mult, pf[1] * p_mult));
        const float2 back = unpack_f16x2(packed);
        pq[0] = back.x;
        pq[1] = back.y;
      } else {
        packed = pack_f16x2(pf[0] * p_mult, pf[1] * p_mult);
        const float2 back = unpack_f16x2(packed);
        pq[0] = back.x;
        pq[1] = back.y;
      }
      ps[r] += denominator_quantized ? pq[0] + pq[1] : pf[0] + pf[1];
      // Key group nt (8 keys) is half of the A fragment of 16-key chunk nt / 2: word r + 2 (nt % 2).
      pa[nt / TILES_PER_PV_CHUNK][r + 2 * (nt % TILES_PER_PV_CHUNK)] = packed;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = alpha[r] * l[r] + ps[r];
}

// O = alpha O + P V, two groups of 8 channels at a time (ldmatrix: matrix m = channel group nc + m / 2).
template <PvType PV, int D, int PV_CHUNKS, int V_ROW>
__device__ __forceinline__ void accumulate_pv(float (&o)[D / 8][4], const float (&alpha)[2], const std::uint32_t (&pa)[PV_CHUNKS][4],
                                              const std::uint8_t* vs, int lm, int lr) {
#pragma unroll
  for (int nc = 0; nc < D / 8; ++nc)
#pragma unroll
    for (int u = 0; u < 4; ++u) o[nc][u] *= alpha[u / 2];
#pragma unroll
  for (int nc = 0; nc < D / 8; nc += 2)
#pragma unroll
    for (int kc = 0; kc < PV_CHUNKS; kc += 2) {
      std::uint32_t b0[4], b1[4];
      load_matrix_x4(b0, vs + ((nc + lm / 2) * 8 + lr) * V_ROW + kc * 32 + (lm % 2) * 16);
      load_matrix_x4(b1, vs + ((nc + lm / 2) * 8 + lr) * V_ROW + (kc + 1) * 32 + (lm % 2) * 16);
      if constexpr (PV == PvType::e4m3) {
        // One e4m3 m16n8k32 as the H200 runs it: two chained HMMAs from zero, one fp32 add.
        float t0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, t1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_f16_m16n8k16(t0, pa[kc], b0);
        mma_f16_m16n8k16(t1, pa[kc], b0 + 2);
        mma_f16_m16n8k16(t0, pa[kc + 1], b1);
        mma_f16_m16n8k16(t1, pa[kc + 1], b1 + 2);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          o[nc][u] += t0[u];
          o[nc + 1][u] += t1[u];
        }
      } else {
        mma_f16_m16n8k16(o[nc], pa[kc], b0);
        mma_f16_m16n8k16(o[nc + 1], pa[kc], b0 + 2);
        mma_f16_m16n8k16(o[nc], pa[kc + 1], b1);
        mma_f16_m16n8k16(o[nc + 1], pa[kc + 1], b1 + 2);
      }
    }
}

// The kernel: per key tile (cp.async double buffer), S = Q K^T on mma.sync, the scores masked, the
// online softmax to P (softmax_to_p), O = alpha O + P V (accumulate_pv); then O / l (store_rows).
template <QkType QK, PvType PV, int D, int WARPS, bool LOGITS>
__global__ void __launch_bounds__(WARPS * 32, (kMinBlocksPerSm<QK, D, WARPS>)) flash_mma_kernel(Params p) {
  using G = Stage<QK, PV, D>;
  using Acc = typename QkTraits<QK>::Acc;
  constexpr int kBm = WARPS * 16;
  constexpr int kQChunks = D * QkTraits<QK>::kBytes / 32;  // 32-byte k-chunks of one Q/K row
  constexpr int kPvChunks = kBc / PvTraits<PV>::kKeysPerMma;
  constexpr int kTilesPerPvChunk = PvTraits<PV>::kKeysPerMma / 8;
  extern __shared__ __align__(16) std::uint8_t smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
  const int block = p.reverse_blocks ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, kh = h / (p.hq / p.hkv);
  const int i0 = block * kBm;
  const int row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};

  // Q fragments stay in registers for the whole row block.
  std::uint32_t qa[kQChunks][4];
  constexpr int kRowBytes = D * QkTraits<QK>::kBytes;
#pragma unroll
  for (int kc = 0; kc < kQChunks; ++kc)
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = row[u % 2];
      qa[kc][u] = r < p.n ? load_u32(p.q + (static_cast<long>(h) * p.n + r) * kRowBytes + kc * 32 + (u / 2) * 16 + 4 * q4) : 0u;
    }
  float sq[2] = {1.0f, 1.0f};
  if constexpr (QK == QkType::int8)
#pragma unroll
    for (int r = 0; r < 2; ++r) sq[r] = row[r] < p.n ? p.q_scales[static_cast<long>(h) * p.n + row[r]] : 0.0f;

  const KeyTiles tiles = key_tiles(i0, kBm, p.n, p.causal, p.window, kBc);
  const int t_begin = tiles.begin, t_end = tiles.end;

  float o[D / 8][4];
#pragma unroll
  for (int nc = 0; nc < D / 8; ++nc)
#pragma unroll
    for (int u = 0; u < 4; ++u) o[nc][u] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  if (t_begin < t_end) {
    load_stage<QK, PV, D, WARPS>(p, smem, kh, t_begin * kBc);
    async_commit();
  }
  for (int t = t_begin; t < t_end; ++t) {
    std::uint8_t* stage = smem + ((t - t_begin) % 2) * G::kBytes;
    if (t + 1 < t_end) load_stage<QK, PV, D, WARPS>(p, smem + ((t + 1 - t_begin) % 2) * G::kBytes, kh, (t + 1) * kBc);
    async_commit();
    async_wait<1>();
    __syncthreads();
    const int j0 = t * kBc;
    const std::uint8_t* ks = stage;
    const std::uint8_t* vs = stage + G::kKBytes;
    const float* kscale = reinterpret_cast<const float*>(stage + G::kKBytes + G::kVBytes);

    // S = Q K^T: 8 key groups of 8.
    Acc acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[nt][u] = Acc(0);
    // ldmatrix: lanes 8m..8m+7 address rows of matrix m = (key group nt + m / 2, k half m % 2).
    const int lm = lane / 8, lr = lane % 8;
#pragma unroll
    for (int kc = 0; kc < kQChunks; ++kc)
#pragma unroll
      for (int nt = 0; nt < 8; nt += 2) {
        std::uint32_t b[4];
        load_matrix_x4(b, ks + ((nt + lm / 2) * 8 + lr) * G::kKRow + kc * 32 + (lm % 2) * 16);
        if constexpr (QK == QkType::int8) {
          mma_i8_m16n8k32(acc[nt], qa[kc], b);
          mma_i8_m16n8k32(acc[nt + 1], qa[kc], b + 2);
        } else {
          mma_f16_m16n8k16(acc[nt], qa[kc], b);
          mma_f16_m16n8k16(acc[nt + 1], qa[kc], b + 2);
        }
      }
    if constexpr (LOGITS) {
      if (blockIdx.x == 0 && warp == 0 && t == t_begin) {
        for (int nt = 0; nt < 8; ++nt)
          for (int u = 0; u < 4; ++u) {
            std::int32_t bits;
            std::memcpy(&bits, &acc[nt][u], 4);
            p.logits[(g + 8 * (u / 2)) * kBc + nt * 8 + 2 * q4 + (u % 2)] = bits;
          }
      }
      async_wait<0>();
      return;
    }

    // Scores in log2 units, masked.
    const bool edge = j0 + kBc > p.n || (p.causal && j0 + kBc - 1 > i0) || p.window > 0;
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int jj = nt * 8 + 2 * q4 + (u % 2);
        if constexpr (QK == QkType::int8) {
          s[nt][u] = static_cast<float>(acc[nt][u]) * (sq[u / 2] * kscale[jj]) * p.c;
        } else {
          s[nt][u] = acc[nt][u] * p.c;
        }
        if (edge) {
          const int i = row[u / 2], j = j0 + jj;
          if (!key_visible(i, j, p.n, p.causal, p.window)) s[nt][u] = -INFINITY;
        }
      }

    float alpha[2];
    std::uint32_t pa[kPvChunks][4];
    softmax_to_p<PV, kPvChunks, kTilesPerPvChunk>(s, m, l, alpha, p.p_mult, p.denominator_quantized, pa);
    accumulate_pv<PV, D, kPvChunks, G::kVRow>(o, alpha, pa, vs, lm, lr);
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
  if constexpr (!LOGITS) {  // the logits hook returned after its first tile
    store_rows<D>(p.out + static_cast<long>(h) * p.n * D, p.v_scales ? p.v_scales + kh * D : nullptr, p.n, row, l,
                  p.denominator_quantized, p.p_mult, q4, [&](int nc, int u) { return o[nc][u]; });
  }
}


template <QkType QK, PvType PV, int D, int WARPS, bool LOGITS>
void launch_one(const Params& p, int blocks) {
  auto kernel = flash_mma_kernel<QK, PV, D, WARPS, LOGITS>;
  const int shared = 2 * Stage<QK, PV, D>::kBytes;
  static const bool allowed = (allow_shared_bytes(kernel, shared), true);  // once per instantiation
  (void)allowed;
  kernel<<<dim3(blocks, p.hq), WARPS * 32, shared>>>(p);
}

template <QkType QK, PvType PV, int D, bool LOGITS>
void launch_warps(const Params& p, int warps) {
  const int bm = warps * 16, blocks = LOGITS ? 1 : (p.n + bm - 1) / bm;
  if (LOGITS || warps == 4) {
    launch_one<QK, PV, D, 4, LOGITS>(p, blocks);
  } else if (warps == 8) {
    launch_one<QK, PV, D, 8, false>(p, blocks);
  } else {
    throw std::invalid_argument("flash_mma: tuning.warps must be 4 or 8, got " + std::to_string(warps));
  }
}

template <QkType QK, PvType PV, bool LOGITS>
void launch_dim(const Params& p, int dim, int warps) {
  switch (dim) {
    case 64: return launch_warps<QK, PV, 64, LOGITS>(p, warps);
    case 128: return launch_warps<QK, PV, 128, LOGITS>(p, warps);
    case 256: return launch_warps<QK, PV, 256, LOGITS>(p, warps);
    default: throw std::invalid_argument("flash_mma: head dim must be 64, 128 or 256, got " + std::to_string(dim));
  }
}

template <bool LOGITS>
void launch(QkType qk, PvType pv, const Params& p, int dim, int warps) {
  // mma.sync has an m16n8k16 bf16 shape, but this family does not issue it: bf16 is the wgmma family's.
  if (qk == QkType::bf16 || pv == PvType::bf16)
    throw std::invalid_argument("flash_mma: QkType and PvType must be int8/fp16 and e4m3/fp16; bf16 operands run in flash_wgmma");
  if (qk == QkType::int8 && pv == PvType::e4m3) return launch_dim<QkType::int8, PvType::e4m3, LOGITS>(p, dim, warps);
  if (qk == QkType::fp16 && pv == PvType::e4m3) return launch_dim<QkType::fp16, PvType::e4m3, LOGITS>(p, dim, warps);
  if (qk == QkType::int8 && pv == PvType::fp16) return launch_dim<QkType::int8, PvType::fp16, LOGITS>(p, dim, warps);
  return launch_dim<QkType::fp16, PvType::fp16, LOGITS>(p, dim, warps);
}

// Device copies of MmaInputs in the layouts of Params (common/matrix_host.hpp): V^T in fp16.
struct DeviceInputs : MatrixDeviceInputs<Params> {
  explicit DeviceInputs(const MmaInputs& in) : MatrixDeviceInputs<Params>(in, VtElement::fp16, "flash_mma") {}
};

}  // namespace

std::vector<float> flash_mma(const MmaInputs& in, const MmaTuning& tuning) {
  if (in.key_tile != kMmaKeyTile) throw std::invalid_argument("flash_mma: key tile must be 64, got " + std::to_string(in.key_tile));
  DeviceInputs dev(in);
  const std::size_t count = static_cast<std::size_t>(in.q_heads) * in.tokens * in.dim;
  float* out = dev.mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  dev.p.out = out;
  launch<false>(in.qk, in.pv, dev.p, in.dim, tuning.warps);
  check_launch("flash_mma_kernel");
  round_output(out, count, in.out);
  return pick_rows(download(out, count), in.q_heads, in.tokens, in.dim, in.rows);
}

std::vector<float> flash_mma_prepared(const Problem& p, const Recipe& r, const MmaTuning& tuning) {
  DeviceBuffers mem;
  const float* q = mem.upload(p.q.data);
  const float* k = mem.upload(p.k.data);
  const float* v = mem.upload(p.v.data);
  const int d = p.q.dim;
  // K with Np rows and V widened to fp16: the layouts the kernel reads (flash_mma.hpp).
  PrepareOptions opt;
  opt.pad_k_rows = true;
  const DevicePrepared pr = prepare_device(q, k, v, p.q.heads, p.k.heads, p.q.tokens, d, r, mem, opt);
  Params prm{};
  prm.q = reinterpret_cast<const std::uint8_t*>(pr.q_codes);
  prm.k = reinterpret_cast<const std::uint8_t*>(pr.k_codes);
  prm.vt = reinterpret_cast<const std::uint8_t*>(pr.vt);
  prm.q_scales = pr.q_scales;
  prm.k_scales = pr.k_scales;
  prm.v_scales = pr.v_scales;
  prm.hq = p.q.heads;
  prm.hkv = p.k.heads;
  prm.n = p.q.tokens;
  prm.np = pr.padded;
  prm.window = p.window;
  prm.causal = p.causal;
  prm.reverse_blocks = p.causal;
  prm.denominator_quantized = r.denominator == Denominator::quantized_p;
  prm.c = static_cast<float>(p.scale()) * 1.44269504088896340736f;
  prm.p_mult = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  const std::size_t count = static_cast<std::size_t>(p.q.heads) * p.q.tokens * d;
  float* out = mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  prm.out = out;
  launch<false>(QkType::int8, PvType::e4m3, prm, d, tuning.warps);
  check_launch("flash_mma_kernel (prepared)");
  round_output(out, count, r.out);
  return pick_rows(download(out, count), p.q.heads, p.q.tokens, d, p.rows.resolve(p.q.tokens));
}

std::vector<std::int32_t> mma_logits(const MmaInputs& in, int h) {
  MmaInputs one = in;
  one.causal = false;
  one.window = 0;
  DeviceInputs dev(one);
  dev.p.reverse_blocks = false;
  std::int32_t* logits = dev.mem.alloc<std::int32_t>(16 * kBc);
  dev.p.logits = logits;
  dev.p.out = nullptr;
  // Only head h's first block runs: shift the head pointer by launching one head.
  const long q_stride = static_cast<long>(in.tokens) * in.dim * (in.qk == QkType::int8 ? 1 : 2);
  const int kh = h / (in.q_heads / in.kv_heads);
  const long k_stride = static_cast<long>(dev.p.np) * in.dim * (in.qk == QkType::int8 ? 1 : 2);
  dev.p.q += h * q_stride;
  dev.p.k += kh * k_stride;
  if (dev.p.q_scales) dev.p.q_scales += static_cast<long>(h) * in.tokens;
  if (dev.p.k_scales) dev.p.k_scales += static_cast<long>(kh) * dev.p.np;
  dev.p.vt += static_cast<long>(kh) * in.dim * dev.p.np * 2;
  dev.p.hq = dev.p.hkv = 1;
  launch<true>(in.qk, in.pv, dev.p, in.dim, 4);
  check_launch("flash_mma_kernel (logits)");
  return download(logits, 16 * kBc);
}

double bench_flash_mma(QkType qk, PvType pv, int batch, int q_heads, int kv_heads, int tokens, int dim, bool causal, int reps,
                       const MmaTuning& tuning) {
  DeviceBuffers mem;
  Params p{};
  const int hq = batch * q_heads, hkv = batch * kv_heads, n = tokens;
  const RandomMmaDevice dev = random_mma_device(mem, qk, pv, VtElement::fp16, hq, hkv, n, dim);
  set_bench(p, dev, pv, hq, hkv, n, dim, causal);
  return median_launch_ms(
      reps, [&] { launch<false>(qk, pv, p, dim, tuning.warps); }, [&] { check_launch("flash_mma_kernel (warm-up)"); }, "flash_mma_kernel (bench)");
}

}  // namespace qattn::gpu
