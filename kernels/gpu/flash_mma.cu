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

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/flash_mma.hpp"
#include "kernels/gpu/platform.hpp"
#include "kernels/gpu/prepare.hpp"

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

  // The block's key tiles (absolute tiles of 64, as the emulator iterates them).
  int lo = 0, hi = p.n;
  const int i_last = min(p.n, i0 + kBm) - 1;
  if (p.causal) hi = min(p.n, i_last + 1);
  if (p.window > 0) {
    lo = max(0, i0 - p.window + 1);
    if (!p.causal) hi = min(p.n, i_last + p.window);
  }
  const int t_begin = lo / kBc, t_end = (hi + kBc - 1) / kBc;

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
          bool vis = j < p.n;
          if (p.causal && j > i) vis = false;
          if (p.window > 0 && (i - j >= p.window || j - i >= p.window)) vis = false;
          if (!vis) s[nt][u] = -INFINITY;
        }
      }

    // Online softmax per row (two rows per lane), P quantized against the running max.
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(mx));
      alpha[r] = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
      m[r] = m_new;
    }
    // pa: P as A-operand fragments of the PV product; ps: this lane's share of the rows' sums.
    std::uint32_t pa[kPvChunks][4];
    float ps[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float pf[2], pq[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = s[nt][2 * r + e];
          pf[e] = x == -INFINITY ? 0.0f : exp2f(x - m[r]);
        }
        std::uint32_t packed;  // P as two fp16 (e4m3 values are fp16 values)
        if constexpr (PV == PvType::e4m3) {
          packed = widen_e4m3x2(pack_e4m3x2(pf[0] * p.p_mult, pf[1] * p.p_mult));
          const float2 back = unpack_f16x2(packed);
          pq[0] = back.x;
          pq[1] = back.y;
        } else {
          packed = pack_f16x2(pf[0] * p.p_mult, pf[1] * p.p_mult);
          const float2 back = unpack_f16x2(packed);
          pq[0] = back.x;
          pq[1] = back.y;
        }
        ps[r] += p.denominator_quantized ? pq[0] + pq[1] : pf[0] + pf[1];
        // Key group nt (8 keys) is half of the A fragment of 16-key chunk nt / 2: word r + 2 (nt % 2).
        pa[nt / kTilesPerPvChunk][r + 2 * (nt % kTilesPerPvChunk)] = packed;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = alpha[r] * l[r] + ps[r];

    // O += P V, two groups of 8 channels at a time (ldmatrix: matrix m = channel group nc + m / 2).
#pragma unroll
    for (int nc = 0; nc < D / 8; ++nc)
#pragma unroll
      for (int u = 0; u < 4; ++u) o[nc][u] *= alpha[u / 2];
#pragma unroll
    for (int nc = 0; nc < D / 8; nc += 2)
#pragma unroll
      for (int kc = 0; kc < kPvChunks; kc += 2) {
        std::uint32_t b0[4], b1[4];
        load_matrix_x4(b0, vs + ((nc + lm / 2) * 8 + lr) * G::kVRow + kc * 32 + (lm % 2) * 16);
        load_matrix_x4(b1, vs + ((nc + lm / 2) * 8 + lr) * G::kVRow + (kc + 1) * 32 + (lm % 2) * 16);
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
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
  if constexpr (!LOGITS) {  // the logits hook returned after its first tile
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float lt = quad_sum(l[r]);
      const float denom = p.denominator_quantized ? lt : lt * p.p_mult;
      if (row[r] >= p.n) continue;
      float* dst = p.out + (static_cast<long>(h) * p.n + row[r]) * D;
#pragma unroll
      for (int nc = 0; nc < D / 8; ++nc) {
        const int c = nc * 8 + 2 * q4;
        const float vs0 = p.v_scales ? p.v_scales[kh * D + c] : 1.0f, vs1 = p.v_scales ? p.v_scales[kh * D + c + 1] : 1.0f;
        *reinterpret_cast<float2*>(dst + c) = make_float2(o[nc][2 * r] * vs0 / denom, o[nc][2 * r + 1] * vs1 / denom);
      }
    }
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
  if (qk == QkType::int8 && pv == PvType::e4m3) return launch_dim<QkType::int8, PvType::e4m3, LOGITS>(p, dim, warps);
  if (qk == QkType::fp16 && pv == PvType::e4m3) return launch_dim<QkType::fp16, PvType::e4m3, LOGITS>(p, dim, warps);
  if (qk == QkType::int8 && pv == PvType::fp16) return launch_dim<QkType::int8, PvType::fp16, LOGITS>(p, dim, warps);
  return launch_dim<QkType::fp16, PvType::fp16, LOGITS>(p, dim, warps);
}

int padded(int n) { return (n + kBc - 1) / kBc * kBc; }

std::uint16_t fp16_bits(float x) { return static_cast<std::uint16_t>(encode(format_of(FormatId::fp16), x)); }

// Device copies of MmaInputs in the layouts of flash_mma.hpp.
struct DeviceInputs {
  Params p{};
  DeviceBuffers mem;
  explicit DeviceInputs(const MmaInputs& in) {
    const int d = in.dim, n = in.tokens, np = padded(n);
    if (in.q_heads <= 0 || in.kv_heads <= 0 || in.q_heads % in.kv_heads != 0 || n <= 0) {
      throw std::invalid_argument("flash_mma: heads must be positive with q_heads a multiple of kv_heads, tokens positive");
    }
    const std::size_t hq = in.q_heads, hkv = in.kv_heads;
    // Q and K rows, K padded with zero keys to Np.
    auto rows_of = [&](std::size_t heads, int rows_out, bool is_q) {
      const std::size_t bytes = in.qk == QkType::int8 ? 1 : 2;
      std::vector<std::uint8_t> buf(heads * rows_out * d * bytes, 0);
      for (std::size_t h = 0; h < heads; ++h)
        for (int i = 0; i < n; ++i)
          for (int c = 0; c < d; ++c) {
            const std::size_t src = (h * n + i) * d + c, dst = (h * rows_out + i) * d + c;
            if (in.qk == QkType::int8) {
              buf[dst] = static_cast<std::uint8_t>((is_q ? in.q_codes : in.k_codes)[src]);
            } else {
              const std::uint16_t b = fp16_bits((is_q ? in.q_values : in.k_values)[src]);
              std::memcpy(&buf[2 * dst], &b, 2);
            }
          }
      return buf;
    };
    p.q = mem.upload(rows_of(hq, n, true));
    p.k = mem.upload(rows_of(hkv, np, false));
    if (in.qk == QkType::int8) {
      p.q_scales = mem.upload(in.q_scales);
      std::vector<float> ks(hkv * np, 0.0f);
      for (std::size_t h = 0; h < hkv; ++h)
        for (int j = 0; j < n; ++j) ks[h * np + j] = in.k_scales[h * n + j];
      p.k_scales = mem.upload(ks);
    }
    // V transposed to [Hkv][d][Np] in fp16 (e4m3 values widened: exact).
    std::vector<std::uint16_t> vt(hkv * d * np, 0);
    const Format e4m3 = format_of(FormatId::e4m3);
    for (std::size_t h = 0; h < hkv; ++h)
      for (int j = 0; j < n; ++j)
        for (int c = 0; c < d; ++c) {
          const float x = in.v_values[(h * n + j) * d + c];
          if (in.pv == PvType::e4m3 && static_cast<float>(round_to(e4m3, x)) != x) {
            throw std::invalid_argument("flash_mma: e4m3 PV needs V values that are e4m3 values");
          }
          vt[(h * d + c) * np + j] = fp16_bits(x);
        }
    p.vt = reinterpret_cast<const std::uint8_t*>(mem.upload(vt));
    if (!in.v_scales.empty()) p.v_scales = mem.upload(in.v_scales);
    p.hq = in.q_heads;
    p.hkv = in.kv_heads;
    p.n = n;
    p.np = np;
    p.window = in.window;
    p.causal = in.causal;
    p.reverse_blocks = in.causal;  // the longest causal rows start first
    p.denominator_quantized = in.denominator_quantized;
    p.c = in.score_factor;
    p.p_mult = in.p_multiplier;
  }
};

}  // namespace

std::vector<float> flash_mma(const MmaInputs& in, const MmaTuning& tuning) {
  DeviceInputs dev(in);
  const std::size_t count = static_cast<std::size_t>(in.q_heads) * in.tokens * in.dim;
  float* out = dev.mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);  // NaN everywhere: every element must be written
  dev.p.out = out;
  launch<false>(in.qk, in.pv, dev.p, in.dim, tuning.warps);
  check_launch("flash_mma_kernel");
  const std::vector<float> all = download(out, count);
  std::vector<float> picked(static_cast<std::size_t>(in.q_heads) * in.rows.size() * in.dim);
  for (int h = 0; h < in.q_heads; ++h)
    for (std::size_t r = 0; r < in.rows.size(); ++r)
      std::copy_n(&all[(static_cast<std::size_t>(h) * in.tokens + in.rows[r]) * in.dim], in.dim,
                  &picked[(h * in.rows.size() + r) * in.dim]);
  return picked;
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
  const std::vector<float> all = download(out, count);
  const std::vector<int> rows = p.rows.resolve(p.q.tokens);
  std::vector<float> picked(static_cast<std::size_t>(p.q.heads) * rows.size() * d);
  for (int h = 0; h < p.q.heads; ++h)
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::copy_n(&all[(static_cast<std::size_t>(h) * p.q.tokens + rows[i]) * d], d, &picked[(h * rows.size() + i) * d]);
  return picked;
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

namespace {

// Random device data by a counter hash (no host transfer): int8 codes in [-127, 127], e4m3 values
// with |value| <= 448 (no NaN), fp16 values uniform in [-2, 2), fp32 scales in [lo, hi).
enum class Fill { int8, e4m3, fp16, scale };

__device__ inline std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_kernel(std::uint8_t* dst, long count, Fill kind, std::uint64_t seed, float lo, float hi) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < count; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const std::uint32_t r = hash32(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(i));
    const float u = (r >> 8) * (1.0f / 16777216.0f);
    switch (kind) {
      case Fill::int8: dst[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(static_cast<int>(r % 255) - 127)); break;
      case Fill::e4m3: {  // an e4m3 value, stored widened to fp16
        std::uint8_t b = static_cast<std::uint8_t>(r);
        if ((b & 0x7F) == 0x7F) b &= 0xFE;  // 0x7F / 0xFF are NaN
        reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(widen_e4m3x2(b));
        break;
      }
      case Fill::fp16: reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(pack_f16x2(u * 4.0f - 2.0f, 0.0f)); break;
      case Fill::scale: reinterpret_cast<float*>(dst)[i] = lo + (hi - lo) * u; break;
    }
  }
}

void fill(void* dst, long count, Fill kind, std::uint64_t seed, float lo = 0, float hi = 0) {
  fill_kernel<<<1024, 256>>>(static_cast<std::uint8_t*>(dst), count, kind, seed, lo, hi);
  check_launch("fill_kernel");
}

}  // namespace

double bench_flash_mma(QkType qk, PvType pv, int batch, int q_heads, int kv_heads, int tokens, int dim, bool causal, int reps,
                       const MmaTuning& tuning) {
  DeviceBuffers mem;
  Params p{};
  const int hq = batch * q_heads, hkv = batch * kv_heads, n = tokens, np = padded(tokens);
  const long qk_bytes = qk == QkType::int8 ? 1 : 2, v_bytes = 2;
  const Fill qk_fill = qk == QkType::int8 ? Fill::int8 : Fill::fp16, v_fill = pv == PvType::e4m3 ? Fill::e4m3 : Fill::fp16;
  std::uint8_t* q = mem.alloc<std::uint8_t>(static_cast<long>(hq) * n * dim * qk_bytes);
  std::uint8_t* k = mem.alloc<std::uint8_t>(static_cast<long>(hkv) * np * dim * qk_bytes);
  std::uint8_t* vt = mem.alloc<std::uint8_t>(static_cast<long>(hkv) * dim * np * v_bytes);
  fill(q, static_cast<long>(hq) * n * dim, qk_fill, 1);
  fill(k, static_cast<long>(hkv) * np * dim, qk_fill, 2);
  fill(vt, static_cast<long>(hkv) * dim * np, v_fill, 3);
  p.q = q;
  p.k = k;
  p.vt = vt;
  if (qk == QkType::int8) {
    float* qs = mem.alloc<float>(static_cast<long>(hq) * n);
    float* ks = mem.alloc<float>(static_cast<long>(hkv) * np);
    fill(qs, static_cast<long>(hq) * n, Fill::scale, 4, 0.01f, 0.02f);  // logits of a few units, as real scores
    fill(ks, static_cast<long>(hkv) * np, Fill::scale, 5, 0.01f, 0.02f);
    p.q_scales = qs;
    p.k_scales = ks;
  }
  float* vsc = mem.alloc<float>(static_cast<long>(hkv) * dim);
  fill(vsc, static_cast<long>(hkv) * dim, Fill::scale, 6, 0.001f, 0.002f);
  p.v_scales = vsc;
  p.out = mem.alloc<float>(static_cast<long>(hq) * n * dim);
  p.hq = hq;
  p.hkv = hkv;
  p.n = n;
  p.np = np;
  p.causal = causal;
  p.reverse_blocks = causal;
  p.denominator_quantized = true;
  p.c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))) * 1.44269504088896340736f;
  p.p_mult = pv == PvType::e4m3 ? 448.0f : 1.0f;
  for (int w = 0; w < 3; ++w) launch<false>(qk, pv, p, dim, tuning.warps);  // warm-up
  check_launch("flash_mma_kernel (warm-up)");
  std::vector<float> ms;
  Timer timer;
  for (int r = 0; r < reps; ++r) {
    timer.start();
    launch<false>(qk, pv, p, dim, tuning.warps);
    ms.push_back(timer.stop_ms());
  }
  check_launch("flash_mma_kernel (bench)");
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

}  // namespace qattn::gpu
