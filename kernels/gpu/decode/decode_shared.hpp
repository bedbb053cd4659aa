#pragma once
// What the two decode paths share: the bit-faithful reference (flash_decode.cu) and the fast path
// (flash_decode_fast.cu). Internal to those two files (device code: include after platform.hpp's
// compiler is chosen, i.e. from a .cu file only). Device helpers are templates over the caller's
// parameter struct, a SplitParams with a layout `lay` naming one tile buffer's regions alike
// (lay.tile: TileLayout).
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/online_softmax.hpp"

namespace qattn::gpu::decode_detail {

inline constexpr int kMinDim = 32, kMaxDim = 256;
inline constexpr int kMaxTile = 256;
inline constexpr std::size_t kArrayPad = 256;  // bytes behind every device array: the 16-byte copies of a
                                               // tile's last run may read up to 15 bytes past its end
inline constexpr float kLog2e = 1.44269504088896340736f;
inline constexpr int kNominalVGroup = 32;  // e4m3 V has channel scales, no groups: a placeholder dividing every dim

// The benchmark's recipe (both paths): K int8 with fp16 scales per 32 channels, V scales per 32
// channels (q8_0 / q4_0), e4m3 P at 448, key tile 64.
inline constexpr int kBenchGroup = 32, kBenchBlockK = 64, kBenchVGroup = 32;
inline constexpr float kBenchPMultiplier = 448.0f;

// ---- P's rounding: the emulator's NonNegativeRounder, in fp32 on the device ----

struct PRound {
  bool integer = false;
  int shift = 0;  // 23 - explicit mantissa bits (float formats); 0 for fp32 itself
  float max = 0, min_normal = 0, quantum = 0;
  // Float formats: the round-half-to-even bias less the tie bit, the kept bits, and 1 / quantum as two
  // powers of two (1 / quantum alone overflows for bf16's 2^-133).
  std::uint32_t half_less_one = 0, keep = 0;
  float inv_quantum_a = 1, inv_quantum_b = 1;
};

PRound p_round_of(FormatId id);

// Which of round_p's three forms a format takes.
enum class PRoundKind { integer, fp32, floating };
template <PRoundKind K>
using PRoundKindTag = std::integral_constant<PRoundKind, K>;

// f(PRoundKindTag<kind of r>{}): a kernel picks the form once, outside its loops.
template <class F>
__device__ inline decltype(auto) with_p_round_kind(const PRound& r, F&& f) {
  if (r.integer) return f(PRoundKindTag<PRoundKind::integer>{});
  if (r.shift == 0) return f(PRoundKindTag<PRoundKind::fp32>{});
  return f(PRoundKindTag<PRoundKind::floating>{});
}

// y >= 0 rounded to the format, saturating (NaN and y >= max give max): equal to decode(encode(f, y))
// (a test checks every midpoint on the device). Branch-free within a kind: below min_normal, y /
// quantum (an exact scaling, as two multiplications) rounded to an integer; above, fp32's bits
// rounded half to even at the format's last mantissa bit.
template <PRoundKind K>
__device__ inline float round_p_as(const PRound& r, float y) {
  if constexpr (K == PRoundKind::integer) {
    return y < r.max ? fminf(rintf(y), r.max) : r.max;  // ties to even
  } else if constexpr (K == PRoundKind::fp32) {
    return y < r.max ? y : r.max;
  } else {
    const std::uint32_t u = __float_as_uint(y);
    const float normal = __uint_as_float((u + r.half_less_one + ((u >> r.shift) & 1u)) & r.keep);
    const float subnormal = rintf(y * r.inv_quantum_a * r.inv_quantum_b) * r.quantum;
    return y < r.max ? fminf(y < r.min_normal ? subnormal : normal, r.max) : r.max;
  }
}
__device__ inline float round_p(const PRound& r, float y) {
  return with_p_round_kind(r, [&](auto kind) { return round_p_as<decltype(kind)::value>(r, y); });
}

__device__ inline float decode_int8_bits(std::uint32_t b) { return static_cast<float>(static_cast<std::int8_t>(b & 0xFFu)); }

// The device arrays of one decode launch.
struct DeviceCache {
  const std::uint32_t* q = nullptr;  // [B][Hq][d/4]
  const float* q_scales = nullptr;   // [B][Hq][groups]
  const std::uint8_t *k = nullptr, *k_scales = nullptr, *v = nullptr, *v_scales = nullptr;
  const int *key_lo = nullptr, *key_hi = nullptr;  // [B]
  float *part_m = nullptr, *part_l = nullptr;      // [B][Hq][splits]
  float* part_o = nullptr;                         // [B][Hq][splits][d]
  float* out = nullptr;                            // [B][Hq][d]
};

// What both split kernels take besides their shared-memory layout.
struct SplitParams : DeviceCache {
  int hq = 0, hkv = 0, cap = 0, d = 0, group = 0, groups = 0, v_group = 32, v_row = 0, bc = 0, splits = 1, k_scale_bytes = 2;
  float c = 0, p_mult = 1;
  bool denominator_quantized = true;
  bool row_sum_exact = false;  // the tile's sum of quantized P is exact in fp32 in any order
  PRound pr;
};

inline void bind(SplitParams& p, const DeviceCache& c) { static_cast<DeviceCache&>(p) = c; }

// The fields of SplitParams from the launch's shape and recipe (host).
void set_split_params(SplitParams& p, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
                      float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k);

// ---- a key tile's bytes: global cache -> shared buffer (16-byte async copies) ----

// One tile buffer: K rows (d bytes + 16: no bank conflicts), then K scales, V rows, V scales.
struct TileLayout {
  int k_stride = 0, k_scales = 0, v = 0, v_scales = 0, bytes = 0;
};
TileLayout tile_layout_of(int d, int groups, int k_scale_bytes, int bc, DecodeV vf, int v_row, int v_group);
inline int up16(int x) { return (x + 15) & ~15; }

__device__ inline void copy_run(unsigned char* dst, const std::uint8_t* src, int bytes) {
  for (int c = threadIdx.x; 16 * c < bytes; c += blockDim.x) async_copy_16(dst + 16 * c, src + 16L * c, true);
}

// Issues the async copies of keys [j0, j0 + rows) of cache row block `bkh` into a tile buffer.
template <DecodeV VF, class P>
__device__ inline void issue_tile(const P& p, unsigned char* buf, long bkh, int j0, int rows) {
  const long key0 = bkh * p.cap + j0;
  // K payload: d bytes a key, into rows of k_stride bytes; consecutive threads take consecutive
  // 16-byte pieces of consecutive keys (coalesced).
  const int parts = p.d / 16, rows_per_pass = blockDim.x / parts;
  const int r0 = threadIdx.x / parts, e = threadIdx.x - r0 * parts;
  if (r0 < rows_per_pass) {
    const std::uint8_t* k = p.k + key0 * p.d + 16 * e;
    for (int r = r0; r < rows; r += rows_per_pass) async_copy_16(buf + r * p.lay.tile.k_stride + 16 * e, k + static_cast<long>(r) * p.d, true);
  }
  // K scales, V codes, V scales: contiguous runs, copied whole.
  copy_run(buf + p.lay.tile.k_scales, p.k_scales + key0 * p.groups * p.k_scale_bytes, rows * p.groups * p.k_scale_bytes);
  copy_run(buf + p.lay.tile.v, p.v + key0 * p.v_row, rows * p.v_row);
  if (VF != DecodeV::e4m3) {
    const int vg = p.d / p.v_group;
    copy_run(buf + p.lay.tile.v_scales, p.v_scales + key0 * vg * 2, rows * vg * 2);
  }
}

// The raw score of one (query row, key): one int dot per scale block, scaled and summed in fp32 in
// block order, as the emulator's Scorer (one block: float(dot) * (sq * sk), the same value).
__device__ inline float raw_score(const SplitParams& p, const std::int8_t* q_row, const float* q_scales, const unsigned char* k_row,
                                  const unsigned char* k_scales) {
  const uint4* qv = reinterpret_cast<const uint4*>(q_row);
  const uint4* kv = reinterpret_cast<const uint4*>(k_row);
  const int per_group = p.group / 16;
  float s = 0.0f;
  for (int gi = 0, v = 0; gi < p.groups; ++gi) {
    int dot = 0;
    for (int e = 0; e < per_group; ++e, ++v) {
      const uint4 a = qv[v], b = kv[v];
      dot = dot4_i8(static_cast<int>(a.x), static_cast<int>(b.x), dot);
      dot = dot4_i8(static_cast<int>(a.y), static_cast<int>(b.y), dot);
      dot = dot4_i8(static_cast<int>(a.z), static_cast<int>(b.z), dot);
      dot = dot4_i8(static_cast<int>(a.w), static_cast<int>(b.w), dot);
    }
    const float sk = p.k_scale_bytes == 2 ? decode_fp16_bits(reinterpret_cast<const std::uint16_t*>(k_scales)[gi])
                                          : reinterpret_cast<const float*>(k_scales)[gi];
    s = s + static_cast<float>(dot) * (q_scales[gi] * sk);
  }
  return s;
}

// ---- the steps of a split block that both paths take alike ----

// The query's visible keys [lo, hi) and the split's key tiles [ta, tb), as RowEmulator::start
// assigns them: per_split = ceil(tiles / splits).
struct SplitTiles {
  int lo = 0, hi = 0, ta = 0, tb = 0;
};
__device__ inline SplitTiles split_tiles(const SplitParams& p, int b, int split) {
  SplitTiles s;
  s.lo = p.key_lo[b];
  s.hi = p.key_hi[b];
  const int t_first = s.lo / p.bc, t_end = max(t_first, (s.hi + p.bc - 1) / p.bc);
  const int per = max(1, (t_end - t_first + p.splits - 1) / p.splits);
  s.ta = min(t_end, t_first + split * per);
  s.tb = min(t_end, s.ta + per);
  return s;
}

// The query rows and scales of `heads` heads from bh0 into shared memory, and the running state.
__device__ inline void load_queries(const SplitParams& p, long bh0, int heads, std::int8_t* qs, float* qsc, float* M, float* L, float* A) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const uint4* src = reinterpret_cast<const uint4*>(p.q + bh0 * (p.d / 4));
  uint4* dst = reinterpret_cast<uint4*>(qs);
  for (int i = tid; i < heads * p.d / 16; i += nt) dst[i] = src[i];
  for (int i = tid; i < heads * p.groups; i += nt) qsc[i] = p.q_scales[bh0 * p.groups + i];
  for (int g = tid; g < heads; g += nt) {
    M[g] = -INFINITY;
    L[g] = 0.0f;
    A[g] = 1.0f;
  }
}

// S = Q K^T for every (query head, key) of the tile in `cur` (invisible keys -inf), and the tile's V
// scales decoded once (q8_0 / q4_0).
template <DecodeV VF, class P>
__device__ inline void score_tile(const P& p, int heads, const std::int8_t* qs, const float* qsc, const unsigned char* cur, int jlo, int jhi, float* S,
                                  float* vgs) {
  const int tid = threadIdx.x, nt = blockDim.x, bc = p.bc;
  const unsigned char* ks = cur + p.lay.tile.k_scales;
  for (int pair = tid; pair < heads * bc; pair += nt) {
    const int g = pair / bc, jj = pair - g * bc;
    float s = -INFINITY;
    if (jj >= jlo && jj < jhi) {
      s = raw_score(p, qs + g * p.d, qsc + g * p.groups, cur + jj * p.lay.tile.k_stride, ks + jj * p.groups * p.k_scale_bytes) * p.c;
    }
    S[pair] = s;
  }
  if (VF != DecodeV::e4m3) {
    const std::uint16_t* vs16 = reinterpret_cast<const std::uint16_t*>(cur + p.lay.tile.v_scales);
    for (int i = tid; i < jhi * (p.d / p.v_group); i += nt) vgs[i] = decode_fp16_bits(vs16[i]);
  }
}

// Online softmax of a tile, one wave per query head: P [bc][heads] against the running max,
// quantized; l, m and alpha (A) per head updated.
__device__ inline void softmax_tile(const SplitParams& p, int heads, float* S, float* P, float* M, float* L, float* A) {
  const int lane = threadIdx.x % kWaveSize, waves = blockDim.x / kWaveSize, bc = p.bc;
  for (int g = threadIdx.x / kWaveSize; g < heads; g += waves) {
    float* srow = S + g * bc;
    float tile_max = -INFINITY;
    for (int jj = lane; jj < bc; jj += kWaveSize) tile_max = fmaxf(tile_max, srow[jj]);
    tile_max = wave_max(tile_max);
    const float m_old = M[g], m_new = fmaxf(m_old, tile_max);
    float alpha = 1.0f, row_sum = 0.0f;
    if (m_new != -INFINITY) {  // always: every tile of the range holds a visible key
      alpha = rescale_factor(m_old, m_new);
      for (int jj = lane; jj < bc; jj += kWaveSize) {
        const float s = srow[jj];
        const float pf = unnormalized_p(s, m_new);
        const float pq = round_p(p.pr, pf * p.p_mult);
        P[jj * heads + g] = pq;
        const float term = p.denominator_quantized ? pq : pf;
        row_sum += term;
        if (!p.row_sum_exact) srow[jj] = term;  // for the in-order sum below
      }
    } else {
      for (int jj = lane; jj < bc; jj += kWaveSize) P[jj * heads + g] = srow[jj] = 0.0f;
    }
    if (p.row_sum_exact) {
      row_sum = wave_sum(row_sum);  // every partial sum is exact: any order gives the in-order sum
    } else {
      wave_sync();
      row_sum = 0.0f;  // the emulator's order, key by key (lane 0's result is the one kept)
      for (int jj = 0; jj < bc; ++jj) row_sum += srow[jj];
    }
    wave_sync();  // every lane has read M[g] and srow before lane 0 writes the row's state
    if (lane == 0) {
      L[g] = alpha * L[g] + row_sum;
      if (m_new != -INFINITY) M[g] = m_new;
      A[g] = alpha;
    }
  }
}

// The split's m and l per query head (an empty split leaves -inf and 0).
__device__ inline void write_state(const SplitParams& p, long bh0, int heads, int split, const float* M, const float* L) {
  for (int g = threadIdx.x; g < heads; g += blockDim.x) {
    const long slot = (bh0 + g) * p.splits + split;
    p.part_m[slot] = M[g];
    p.part_l[slot] = L[g];
  }
}

// H consecutive floats of shared memory (one per query head: P of one key, a tile's maxima), in as
// few loads as H allows; src is 16-byte aligned where H is a multiple of 4, 8-byte where H = 2.
template <int H>
__device__ inline void load_heads(const float* src, float (&pj)[H]) {
  static_assert(H == 1 || H == 2 || H % 4 == 0, "heads a block serves: 1, 2, 4 or 8");
  if constexpr (H % 4 == 0) {
#pragma unroll
    for (int k = 0; k < H / 4; ++k) {
      const float4 x = reinterpret_cast<const float4*>(src)[k];
      pj[4 * k] = x.x;
      pj[4 * k + 1] = x.y;
      pj[4 * k + 2] = x.z;
      pj[4 * k + 3] = x.w;
    }
  } else if constexpr (H == 2) {
    const float2 x = *reinterpret_cast<const float2*>(src);
    pj[0] = x.x;
    pj[1] = x.y;
  } else {
    pj[0] = src[0];
  }
}

// ---- the merge: one block per (batch, query head) ----

// The splits of one (batch, query head) merged as RowEmulator::finish does (m = max m_s,
// f_s = exp2(m_s - m), l = sum f_s l_s, o = sum f_s o_s, in split order), then o / l.
template <class P>  // a SplitParams (the kernel is each file's own symbol)
__global__ void __launch_bounds__(1024) decode_merge_kernel(P p) {
  const long bh = blockIdx.x;
  const float* m = p.part_m + bh * p.splits;
  const float* l = p.part_l + bh * p.splits;
  float mx = -INFINITY;
  for (int k = 0; k < p.splits; ++k) mx = fmaxf(mx, m[k]);
  for (int c = threadIdx.x; c < p.d; c += blockDim.x) {
    float lsum = 0.0f, o = 0.0f;
    for (int k = 0; k < p.splits; ++k) {
      const float f = rescale_factor(m[k], mx);
      lsum = lsum + f * l[k];
      o = o + f * p.part_o[(bh * p.splits + k) * p.d + c];
    }
    const float denom = p.denominator_quantized ? lsum : lsum * p.p_mult;
    p.out[bh * p.d + c] = o / denom;
  }
}

// ---- host side ----

inline constexpr int kDefaultSharedBytes = 48 * 1024;  // dynamic shared memory a kernel gets without asking

// One decode: the split kernel with its grid, block and parameters (the device pointers bound by the
// caller), and the merge's shape.
template <class P>
struct DecodeLaunch {
  P p;
  void (*kernel)(P) = nullptr;
  dim3 grid;
  int threads = 0, merge_threads = 0, merge_blocks = 0;
};

// Both kernels, no synchronization (the caller checks).
template <class P>
void launch_decode(const DecodeLaunch<P>& l) {
  if (l.p.lay.total > kDefaultSharedBytes) allow_shared_bytes(l.kernel, l.p.lay.total);
  l.kernel<<<l.grid, l.threads, l.p.lay.total>>>(l.p);
  decode_merge_kernel<P><<<l.merge_blocks, l.merge_threads>>>(l.p);
}


// Throws std::invalid_argument("<who>: <what>") unless ok.
void require(bool ok, const std::string& what, const char* who = "flash_decode");
// The shape and sizes of DecodeInputs (what both paths take).
void check_inputs(const DecodeInputs& in, const char* who = "flash_decode");
int round_up(int x, int q);
// The merge's block size: a multiple of the wave size, at most 1024.
void check_merge_threads(int threads, const char* who);

// The packed cache uploaded (every array padded by kArrayPad zero bytes), the partials and the
// output allocated and filled with NaN, so that an element no thread writes shows in the result.
DeviceCache upload_decode_cache(DeviceBuffers& mem, const DecodeInputs& in, const PackedDecodeCache& pk);

// The benchmark: random device-resident inputs (never zeros; layout of flash_decode.hpp with the
// bench recipe above, every query at the end of its cache of `tokens` keys), `launch` timed (median
// of `reps` after warm-up), the bytes counted and a device copy timed. Fills ms, bytes, gbytes_per_s
// and copy_gbytes_per_s; the caller fills the rest.
void check_bench_shape(int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps, const char* who);
float bench_score_factor(int dim);
DecodeBench run_decode_bench(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                             const std::function<void(const DeviceCache&)>& launch, const char* what);


// run_decode_bench over a planned launch (bench recipe), with its blocks and their occupancy.
template <class P>
DecodeBench bench_decode_launch(DecodeLaunch<P>& l, DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                                const char* what) {
  DecodeBench res = run_decode_bench(
      v, batch, q_heads, kv_heads, tokens, dim, split_k, reps,
      [&l](const DeviceCache& c) {
        bind(l.p, c);
        launch_decode(l);
      },
      what);
  res.blocks = static_cast<int>(l.grid.x * l.grid.y * l.grid.z);
  if (l.p.lay.total > kDefaultSharedBytes) allow_shared_bytes(l.kernel, l.p.lay.total);
  res.blocks_per_sm = max_active_blocks(l.kernel, l.threads, l.p.lay.total);
  return res;
}

}  // namespace qattn::gpu::decode_detail
