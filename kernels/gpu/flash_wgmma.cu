// Warpgroup flash attention (NVIDIA sm_90a, wgmma), one warpgroup (4 warps) per 64 query rows, key
// tiles of 64, two shared-memory stages filled by cp.async:
//   S = Q K^T            s8 wgmma m64n64k32 (int32, exact) or fp16 m64n64k16 (fp32)
//   s = S (sq sk) c       fp32, in the emulator's order; masked keys are -inf
//   m' = max(m, rowmax s); alpha = 2^(m - m'); P = round(2^(s - m') * multiplier)
//   l = alpha l + rowsum P;  O = alpha O + P V   (e4m3 or fp16 wgmma, P from registers)
//   out = O vscale / l
// Each warp's share of S and O has the mma family's fragment layout (16 rows; per 8-column block,
// rows g and g + 8, columns 2t and 2t + 1), so the softmax below is the mma family's, row for row.
//
// Keys in shared memory. An e4m3 A operand from registers holds, per thread, four consecutive k of
// a row (4t..4t+3 and 16+4t..16+4t+3 of each 32), while S leaves the thread columns 2t, 2t+1 of each
// block of 8. Rather than shuffling P between threads, K's rows are stored permuted within each 32
// keys: shared row c holds key kperm(c), so that the thread's own S values are exactly its A
// fragment, and V^T is read in plain key order. Sums over keys are unchanged; the emulator's
// accumulator sees the products of each 32 keys together (an instruction's k), whose alignment and
// sum do not depend on their order. fp16 P needs no permutation (its A fragment is S's layout).
//
// Operand tiles use the no-swizzle K-major layout (wgmma.hpp): core matrices of 8 rows x 16 bytes,
// those adjacent in K 128 bytes apart, 8-row groups one row's worth of core matrices apart.
// Version 1 of the family (kernels/gpu/PERF.md): synchronous wgmma groups, no TMA, no
// producer/consumer split.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/gpu/flash_wgmma.hpp"
#include "kernels/gpu/mma_host.hpp"
#include "kernels/gpu/platform.hpp"
#include "kernels/gpu/fragment_rows.hpp"
#include "kernels/gpu/wgmma.hpp"

namespace qattn::gpu {

namespace {

constexpr int kBm = 64;             // query rows per block: one warpgroup
constexpr int kBc = kMmaKeyTile;    // keys per tile
constexpr int kCoreBytes = 128;     // one core matrix: 8 rows x 16 bytes
constexpr int kStepBytes = 32;      // K bytes one instruction consumes (k32 of 8-bit, k16 of 16-bit)

template <QkType QK>
struct Qk {
  static constexpr int kBytes = QK == QkType::int8 ? 1 : 2;
  using Acc = std::conditional_t<QK == QkType::int8, std::int32_t, float>;
};
template <PvType PV>
struct Pv {
  static constexpr int kBytes = PV == PvType::e4m3 ? 1 : 2;
  static constexpr int kKeysPerStep = kStepBytes / kBytes;  // 32 e4m3 keys or 16 fp16 keys per instruction
};
static_assert(Pv<PvType::e4m3>::kKeysPerStep == 32 && Pv<PvType::fp16>::kKeysPerStep == 16, "the instructions' k");

// The shared row holding key c of a 64-key tile's S columns: within each 32 keys, S column
// c = 8 j' + 2 t + b (j' = 0..3, t = 0..3, b = 0..1) is the A fragment's k = 4 t + 2 j' + b for j' < 2
// and 16 + 4 t + 2 (j' - 2) + b for j' >= 2. Identity for fp16 P.
template <PvType PV>
__host__ __device__ constexpr int key_of_column(int c) {
  if constexpr (PV == PvType::fp16) {
    return c;
  } else {
    const int base = c & ~31, w = c & 31, jp = w / 8, t = (w % 8) / 2, b = w % 2;
    return base + (jp < 2 ? 4 * t + 2 * jp + b : 16 + 4 * t + 2 * (jp - 2) + b);
  }
}

// Byte offset of 16-byte chunk c16 of row r in a K-major tile whose rows are row_bytes long.
[[maybe_unused]] __device__ constexpr int core_offset(int r, int c16, int row_bytes) {
  return (r / 8) * (row_bytes / 16) * kCoreBytes + c16 * kCoreBytes + (r % 8) * 16;
}

[[maybe_unused]] __device__ inline std::uint64_t tile_descriptor(const std::uint8_t* tile, int row_bytes, int step) {
  // Instruction `step` reads K bytes [32 step, 32 step + 32): two core matrices further along K.
  return wgmma_descriptor(shared_address(tile + step * 2 * kCoreBytes), kCoreBytes, (row_bytes / 16) * kCoreBytes);
}

struct Params {
  const std::uint8_t *q, *k, *vt;               // Q [Hq][N][d], K [Hkv][Np][d], V^T [Hkv][d][Np]
  const float *q_scales, *k_scales, *v_scales;  // [Hq][N], [Hkv][Np], [Hkv][d] (or null)
  float* out;                                   // [Hq][N][d]
  std::int32_t* logits;                         // test hook: [16][64] or null
  int* built;                                   // set to 0 by a device pass without wgmma
  int hq, hkv, n, np, window;
  bool causal, denominator_quantized, reverse_blocks;
  float c, p_mult;
};

template <QkType QK, PvType PV, int D>
struct Smem {
  static constexpr int kQRow = D * Qk<QK>::kBytes;  // one query or key, all channels
  static constexpr int kVRow = kBc * Pv<PV>::kBytes;  // one channel, all keys of the tile
  static constexpr int kQBytes = kBm * kQRow;
  static constexpr int kKBytes = kBc * kQRow;
  static constexpr int kVBytes = D * kVRow;
  static constexpr int kStageBytes = kKBytes + kVBytes + kBc * 4;  // + the keys' scales
  static constexpr int kBytes = kQBytes + 2 * kStageBytes;
};

template <QkType QK, PvType PV, int D>
__device__ inline void load_q(const Params& p, std::uint8_t* sq, int h, int i0) {
  using G = Smem<QK, PV, D>;
  constexpr int kChunks = G::kQRow / 16;
  for (int u = threadIdx.x; u < kBm * kChunks; u += kWarpgroupThreads) {
    const int r = u / kChunks, c16 = u % kChunks, i = i0 + r;
    const std::uint8_t* src = p.q + (static_cast<long>(h) * p.n + min(i, p.n - 1)) * G::kQRow + c16 * 16;
    async_copy_16(sq + core_offset(r, c16, G::kQRow), src, i < p.n);  // rows past N read as zero
  }
}

template <QkType QK, PvType PV, int D>
__device__ inline void load_stage(const Params& p, std::uint8_t* stage, int kh, int j0) {
  using G = Smem<QK, PV, D>;
  constexpr int kKChunks = G::kQRow / 16, kVChunks = G::kVRow / 16;
  for (int u = threadIdx.x; u < kBc * kKChunks; u += kWarpgroupThreads) {
    const int r = u / kKChunks, c16 = u % kKChunks;  // shared row r holds key key_of_column(r)
    const std::uint8_t* src = p.k + (static_cast<long>(kh) * p.np + j0 + key_of_column<PV>(r)) * G::kQRow + c16 * 16;
    async_copy_16(stage + core_offset(r, c16, G::kQRow), src, true);
  }
  std::uint8_t* sv = stage + G::kKBytes;
  for (int u = threadIdx.x; u < D * kVChunks; u += kWarpgroupThreads) {
    const int r = u / kVChunks, c16 = u % kVChunks;  // channel r, keys in plain order
    const std::uint8_t* src = p.vt + (static_cast<long>(kh) * D + r) * p.np * Pv<PV>::kBytes + j0 * Pv<PV>::kBytes + c16 * 16;
    async_copy_16(sv + core_offset(r, c16, G::kVRow), src, true);
  }
  if constexpr (QK == QkType::int8) {
    const float* sg = p.k_scales + static_cast<long>(kh) * p.np + j0;
    if (threadIdx.x < kBc / 4) async_copy_16(stage + G::kKBytes + G::kVBytes + threadIdx.x * 16, sg + 4 * threadIdx.x, true);
  }
}

template <QkType QK, PvType PV, int D, bool PER_TILE, bool LOGITS>
__global__ void __launch_bounds__(kWarpgroupThreads, 1) flash_wgmma_kernel(Params p) {
  if constexpr (!kWgmmaCompiled) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) *p.built = 0;
    return;
  } else {
    using G = Smem<QK, PV, D>;
    using Acc = typename Qk<QK>::Acc;
    constexpr int kQkSteps = G::kQRow / kStepBytes;              // instructions per S tile
    constexpr int kPvSteps = kBc / Pv<PV>::kKeysPerStep;        // instructions per P V tile
    constexpr int kBlocksPerStep = Pv<PV>::kKeysPerStep / 8;     // 8-column S blocks per P V instruction
    extern __shared__ __align__(128) std::uint8_t smem[];
    std::uint8_t* sq = smem;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4;
    const int block = p.reverse_blocks ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int h = blockIdx.y, kh = h / (p.hq / p.hkv);
    const int i0 = block * kBm;
    const int row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
    float sqs[2] = {1.0f, 1.0f};
    if constexpr (QK == QkType::int8)
#pragma unroll
      for (int r = 0; r < 2; ++r) sqs[r] = row[r] < p.n ? p.q_scales[static_cast<long>(h) * p.n + row[r]] : 0.0f;

    const KeyTiles tiles = key_tiles(i0, kBm, p.n, p.causal, p.window, kBc);
    const int t_begin = tiles.begin, t_end = tiles.end;

    float o[D / 2];
#pragma unroll
    for (int x = 0; x < D / 2; ++x) o[x] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    load_q<QK, PV, D>(p, sq, h, i0);
    if (t_begin < t_end) load_stage<QK, PV, D>(p, smem + G::kQBytes, kh, t_begin * kBc);
    async_commit();
    for (int t = t_begin; t < t_end; ++t) {
      std::uint8_t* stage = smem + G::kQBytes + ((t - t_begin) % 2) * G::kStageBytes;
      if (t + 1 < t_end) load_stage<QK, PV, D>(p, smem + G::kQBytes + ((t + 1 - t_begin) % 2) * G::kStageBytes, kh, (t + 1) * kBc);
      async_commit();
      async_wait<1>();
      fence_shared_for_async_proxy();  // the copies just waited for are read by wgmma next
      __syncthreads();
      const int j0 = t * kBc;
      const std::uint8_t* sk = stage;
      const std::uint8_t* sv = stage + G::kKBytes;
      const float* kscale = reinterpret_cast<const float*>(stage + G::kKBytes + G::kVBytes);

      // S = Q K^T: kQkSteps chained instructions from zero.
      Acc s_acc[kBc / 2];
#pragma unroll
      for (int x = 0; x < kBc / 2; ++x) s_acc[x] = Acc(0);
#pragma unroll
      for (int x = 0; x < kBc / 2; ++x) wgmma_fence_operand(s_acc[x]);
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < kQkSteps; ++st) {
        const std::uint64_t da = tile_descriptor(sq, G::kQRow, st), db = tile_descriptor(sk, G::kQRow, st);
        if constexpr (QK == QkType::int8) wgmma_s8_ss<kBc>(s_acc, da, db);
        else wgmma_f16_ss<kBc>(s_acc, da, db);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
#pragma unroll
      for (int x = 0; x < kBc / 2; ++x) wgmma_fence_operand(s_acc[x]);

      if constexpr (LOGITS) {
        if (blockIdx.x == 0 && warp == 0 && t == t_begin)
#pragma unroll
          for (int x = 0; x < kBc / 2; ++x) {
            const int jb = x / 4, u = x % 4, col = 8 * jb + 2 * q4 + (u % 2);
            std::int32_t bits;
            std::memcpy(&bits, &s_acc[x], 4);
            p.logits[(g + 8 * (u / 2)) * kBc + key_of_column<PV>(col)] = bits;
          }
        async_wait<0>();
        return;
      }

      // Scores in log2 units, masked. Column col of S is key j0 + key_of_column(col).
      const bool edge = j0 + kBc > p.n || (p.causal && j0 + kBc - 1 > i0) || p.window > 0;
      float s[kBc / 2];
#pragma unroll
      for (int x = 0; x < kBc / 2; ++x) {
        const int jb = x / 4, u = x % 4, jj = key_of_column<PV>(8 * jb + 2 * q4 + (u % 2));
        if constexpr (QK == QkType::int8) {
          s[x] = static_cast<float>(s_acc[x]) * (sqs[u / 2] * kscale[jj]) * p.c;
        } else {
          s[x] = s_acc[x] * p.c;
        }
        if (edge) {
          const int i = row[u / 2], j = j0 + jj;
          if (!key_visible(i, j, p.n, p.causal, p.window)) s[x] = -INFINITY;
        }
      }

      // Online softmax per row (two rows per lane), P quantized against the running max.
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int jb = 0; jb < kBc / 8; ++jb) mx = fmaxf(mx, fmaxf(s[4 * jb + 2 * r], s[4 * jb + 2 * r + 1]));
        const float m_new = fmaxf(m[r], quad_max(mx));
        alpha[r] = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
        m[r] = m_new;
      }
      // pa: P as the A fragments of the kPvSteps instructions; ps: this lane's share of the row sums.
      // e4m3: word w of step st holds 4 keys of row g + 8 (w % 2) from blocks 4 st + 2 (w / 2) and
      // + 1 (two codes each); fp16: word w holds 2 keys of block kBlocksPerStep st + w / 2.
      std::uint32_t pa[kPvSteps][4];
      float ps[2] = {0.0f, 0.0f};
#pragma unroll
      for (int jb = 0; jb < kBc / 8; ++jb)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float pf[2], pq[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float x = s[4 * jb + 2 * r + e];
            pf[e] = x == -INFINITY ? 0.0f : exp2f(x - m[r]);
          }
          const int st = jb / kBlocksPerStep, in_step = jb % kBlocksPerStep;
          if constexpr (PV == PvType::e4m3) {
            const std::uint16_t codes = pack_e4m3x2(pf[0] * p.p_mult, pf[1] * p.p_mult);
            const float2 back = unpack_f16x2(widen_e4m3x2(codes));
            pq[0] = back.x;
            pq[1] = back.y;
            std::uint32_t& w = pa[st][r + 2 * (in_step / 2)];
            if (in_step % 2 == 0) w = codes;
            else w |= static_cast<std::uint32_t>(codes) << 16;
          } else {
            const std::uint32_t packed = pack_f16x2(pf[0] * p.p_mult, pf[1] * p.p_mult);
            const float2 back = unpack_f16x2(packed);
            pq[0] = back.x;
            pq[1] = back.y;
            pa[st][r + 2 * in_step] = packed;
          }
          ps[r] += p.denominator_quantized ? pq[0] + pq[1] : pf[0] + pf[1];
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = alpha[r] * l[r] + ps[r];
      // P's packing is ordinary (non-volatile) code: keep it above the wgmma.fence that must follow it.
#pragma unroll
      for (int st = 0; st < kPvSteps; ++st)
#pragma unroll
        for (int w = 0; w < 4; ++w) wgmma_fence_operand(pa[st][w]);

      // O = alpha O + P V.
#pragma unroll
      for (int x = 0; x < D / 2; ++x) o[x] *= alpha[(x % 4) / 2];
      // acc += P V: kPvSteps chained instructions into acc (the tile's own sum, or O itself).
      const auto pv_into = [&](float (&acc)[D / 2]) {
#pragma unroll
        for (int x = 0; x < D / 2; ++x) wgmma_fence_operand(acc[x]);
        wgmma_fence();
#pragma unroll
        for (int st = 0; st < kPvSteps; ++st) {
          const std::uint64_t db = tile_descriptor(sv, G::kVRow, st);
          if constexpr (PV == PvType::e4m3) wgmma_e4m3_rs<D>(acc, pa[st], db);
          else wgmma_f16_rs<D>(acc, pa[st], db);
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();
#pragma unroll
        for (int x = 0; x < D / 2; ++x) wgmma_fence_operand(acc[x]);
      };
      if constexpr (PER_TILE) {
        float tile[D / 2];
#pragma unroll
        for (int x = 0; x < D / 2; ++x) tile[x] = 0.0f;
        pv_into(tile);
#pragma unroll
        for (int x = 0; x < D / 2; ++x) o[x] += tile[x];  // one fp32 add per tile (nearest even)
      } else {
        pv_into(o);
      }
      __syncthreads();  // the next iteration's prefetch overwrites this stage
    }
    if constexpr (!LOGITS) {
      store_rows<D>(p.out + static_cast<long>(h) * p.n * D, p.v_scales ? p.v_scales + kh * D : nullptr, p.n, row, l,
                    p.denominator_quantized, p.p_mult, q4, [&](int nc, int u) { return o[4 * nc + u]; });
    }
  }
}

template <QkType QK, PvType PV, int D, bool PER_TILE, bool LOGITS>
void launch_one(const Params& p, int blocks) {
  auto kernel = flash_wgmma_kernel<QK, PV, D, PER_TILE, LOGITS>;
  const int shared = Smem<QK, PV, D>::kBytes;
  static const bool allowed = (allow_shared_bytes(kernel, shared), true);  // once per instantiation
  (void)allowed;
  kernel<<<dim3(blocks, p.hq), kWarpgroupThreads, shared>>>(p);
}

template <QkType QK, PvType PV, bool LOGITS>
void launch_dim(const Params& p, int dim, WgmmaPvAcc acc) {
  const int blocks = LOGITS ? 1 : (p.n + kBm - 1) / kBm;
  const bool per_tile = acc == WgmmaPvAcc::per_tile;
  switch (dim) {
    case 64: return per_tile ? launch_one<QK, PV, 64, true, LOGITS>(p, blocks) : launch_one<QK, PV, 64, false, LOGITS>(p, blocks);
    case 128: return per_tile ? launch_one<QK, PV, 128, true, LOGITS>(p, blocks) : launch_one<QK, PV, 128, false, LOGITS>(p, blocks);
    case 256: return per_tile ? launch_one<QK, PV, 256, true, LOGITS>(p, blocks) : launch_one<QK, PV, 256, false, LOGITS>(p, blocks);
    default: throw std::invalid_argument("flash_wgmma: head dim must be 64, 128 or 256, got " + std::to_string(dim));
  }
}

template <bool LOGITS>
void launch(QkType qk, PvType pv, const Params& p, int dim, WgmmaPvAcc acc) {
  if (qk == QkType::int8 && pv == PvType::e4m3) return launch_dim<QkType::int8, PvType::e4m3, LOGITS>(p, dim, acc);
  if (qk == QkType::fp16 && pv == PvType::e4m3) return launch_dim<QkType::fp16, PvType::e4m3, LOGITS>(p, dim, acc);
  if (qk == QkType::int8 && pv == PvType::fp16) return launch_dim<QkType::int8, PvType::fp16, LOGITS>(p, dim, acc);
  return launch_dim<QkType::fp16, PvType::fp16, LOGITS>(p, dim, acc);
}

// After a launch: the CUDA error, then whether the device code held wgmma at all.
void check_built(const int* built, const char* what) {
  check_launch(what);
  if (download(built, 1)[0] != 1)
    throw std::runtime_error(std::string(what) + ": this build holds no sm_90a code (wgmma); configure with "
                             "CMAKE_CUDA_ARCHITECTURES including 90a");
}

// Device copies of MmaInputs in the layouts of Params (mma_host.hpp): e4m3 V^T as e4m3 codes (the
// instruction's operand), fp16 V^T as fp16.
struct DeviceInputs : MatrixDeviceInputs<Params> {
  explicit DeviceInputs(const MmaInputs& in)
      : MatrixDeviceInputs<Params>(in, in.pv == PvType::e4m3 ? VtElement::e4m3_code : VtElement::fp16, "flash_wgmma") {
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
  launch<false>(in.qk, in.pv, dev.p, in.dim, pv_acc);
  check_built(dev.p.built, "flash_wgmma_kernel");
  return pick_rows(download(out, count), in.q_heads, in.tokens, in.dim, in.rows);
}

std::vector<std::int32_t> wgmma_logits(const MmaInputs& in, int h) {
  MmaInputs one = in;
  one.causal = false;
  one.window = 0;
  DeviceInputs dev(one);
  dev.p.reverse_blocks = false;
  std::int32_t* logits = dev.mem.alloc<std::int32_t>(16 * kBc);
  fill_bytes(logits, 0xFF, sizeof(std::int32_t) * 16 * kBc);
  dev.p.logits = logits;
  // One block of head h: its Q and its K head selected by offsetting the pointers.
  const long qk_bytes = in.qk == QkType::int8 ? 1 : 2, v_bytes = in.pv == PvType::e4m3 ? 1 : 2;
  const int kh = h / (in.q_heads / in.kv_heads);
  dev.p.q += h * static_cast<long>(in.tokens) * in.dim * qk_bytes;
  dev.p.k += kh * static_cast<long>(dev.p.np) * in.dim * qk_bytes;
  if (dev.p.q_scales) dev.p.q_scales += static_cast<long>(h) * in.tokens;
  if (dev.p.k_scales) dev.p.k_scales += static_cast<long>(kh) * dev.p.np;
  dev.p.vt += static_cast<long>(kh) * in.dim * dev.p.np * v_bytes;
  dev.p.hq = dev.p.hkv = 1;
  launch<true>(in.qk, in.pv, dev.p, in.dim, WgmmaPvAcc::per_tile);
  check_built(dev.p.built, "flash_wgmma_kernel (logits)");
  return download(logits, 16 * kBc);
}

double bench_flash_wgmma(QkType qk, PvType pv, WgmmaPvAcc pv_acc, int batch, int q_heads, int kv_heads, int tokens, int dim,
                         bool causal, int reps) {
  DeviceBuffers mem;
  Params p{};
  const int hq = batch * q_heads, hkv = batch * kv_heads, n = tokens;
  const RandomMmaDevice dev = random_mma_device(mem, qk, pv, pv == PvType::e4m3 ? VtElement::e4m3_code : VtElement::fp16, hq, hkv, n, dim);
  set_bench(p, dev, pv, hq, hkv, n, dim, causal);
  p.built = mem.upload(std::vector<int>{1});
  return median_launch_ms(
      reps, [&] { launch<false>(qk, pv, p, dim, pv_acc); }, [&] { check_built(p.built, "flash_wgmma_kernel (warm-up)"); }, "flash_wgmma_kernel (bench)");
}

}  // namespace qattn::gpu
