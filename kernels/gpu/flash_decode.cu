// Split-K decode: one query row per (batch, query head) against the packed int8 K cache of the RDNA3
// DOT4 document and an e4m3 / q8_0 / q4_0 V cache (layout: flash_decode.hpp).
//
// Kernel 1, one block per (split, kv head, batch): the split's key tiles in order, for every query
// head of the GQA group (K and V are read once for the group). Per tile of Bc keys, as
// RowEmulator::step does for that split:
//   S = (sum over scale blocks of fp32(int dot) * (sq * sk)) * c,      c = fp32(scale) * fp32(log2 e)
//   m_new = max(m, max S); alpha = exp2(m - m_new); P = round(exp2(S - m_new) * multiplier)
//   l = alpha * l + sum P;  o = o * alpha, then o = o + P_j * v_j key by key in fp32
// The next tile's K and V arrive by 16-byte async copies into the other of two shared buffers while
// this one is computed. Kernel 2, one block per (batch, query head): the splits merged as
// RowEmulator::finish does (m = max m_s, f_s = exp2(m_s - m), l = sum f_s l_s, o = sum f_s o_s, o / l).
// Tuning (threads per block) never changes a result: every value is one fixed sequence of operations
// whichever thread computes it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/flash_decode.hpp"
#include "kernels/gpu/platform.hpp"

namespace qattn::gpu {

namespace {

constexpr int kMaxThreads = 256;  // with 4 blocks per SM: at most 64 registers (no spills)
constexpr int kMinDim = 32, kMaxDim = 256;
constexpr int kMaxTile = 256;
constexpr std::size_t kArrayPad = 256;  // bytes behind every device array: the 16-byte copies of a
                                        // tile's last run may read up to 15 bytes past its end
constexpr float kLog2e = 1.44269504088896340736f;

// ---- P's rounding: the emulator's NonNegativeRounder, in fp32 on the device ----

struct PRound {
  bool integer = false;
  int shift = 0;  // 23 - explicit mantissa bits (float formats); 0 for fp32 itself
  float max = 0, min_normal = 0, quantum = 0;
};

PRound p_round_of(FormatId id) {
  const Format f = format_of(id);
  PRound r;
  r.integer = f.kind == Kind::integer;
  r.shift = 23 - f.man_bits;
  r.max = static_cast<float>(max_finite(f));
  r.min_normal = static_cast<float>(min_normal(f));
  r.quantum = static_cast<float>(min_subnormal(f));
  return r;
}

// y >= 0 rounded to the format, saturating: equal to decode(encode(f, y)) (a test checks every
// midpoint on the device).
__device__ inline float round_p(const PRound& r, float y) {
  if (!(y < r.max)) return r.max;
  if (r.integer) return rintf(y);  // ties to even
  if (r.shift == 0) return y;
  if (y < r.min_normal) return rintf(y / r.quantum) * r.quantum;  // exact scalings by powers of two
  std::uint32_t u = __builtin_bit_cast(std::uint32_t, y);
  u += ((1u << (r.shift - 1)) - 1u) + ((u >> r.shift) & 1u);
  u &= ~((1u << r.shift) - 1u);
  const float v = __builtin_bit_cast(float, u);
  return v > r.max ? r.max : v;
}

__device__ inline float decode_int8_bits(std::uint32_t b) { return static_cast<float>(static_cast<std::int8_t>(b & 0xFFu)); }

// ---- shared-memory layout of a split block (byte offsets, all 16-byte aligned) ----

struct Layout {
  int q = 0, q_scales = 0, s = 0, p = 0, o = 0, m = 0, l = 0, a = 0, v_channel = 0, v_group_scales = 0;  // fixed regions
  int buffers = 0, buffer_bytes = 0;  // two tile buffers
  int k_stride = 0;                   // inside a buffer: K rows (d bytes + 16: no bank conflicts) ...
  int k_scales = 0, v = 0, v_scales = 0;  // ... then K scales, V rows, V scales
  int total = 0;
};

int up16(int x) { return (x + 15) & ~15; }

Layout layout_of(int group_heads, int d, int groups, int k_scale_bytes, int bc, DecodeV vf, int v_row, int v_group) {
  Layout L;
  int off = 0;
  const auto take = [&](int bytes) {
    const int at = off;
    off += up16(bytes);
    return at;
  };
  const int G = group_heads;
  L.q = take(G * d);
  L.q_scales = take(4 * G * groups);
  L.s = take(4 * G * bc);
  L.p = take(4 * bc * G);
  L.o = take(4 * G * d);
  L.m = take(4 * G);
  L.l = take(4 * G);
  L.a = take(4 * G);
  L.v_channel = take(vf == DecodeV::e4m3 ? 4 * d : 0);
  L.v_group_scales = take(vf == DecodeV::e4m3 ? 0 : 4 * bc * (d / v_group));
  L.k_stride = d + 16;
  L.k_scales = up16(bc * L.k_stride);
  L.v = L.k_scales + up16(bc * groups * k_scale_bytes);
  L.v_scales = L.v + up16(bc * v_row);
  L.buffer_bytes = L.v_scales + (vf == DecodeV::e4m3 ? 0 : up16(bc * (d / v_group) * 2));
  L.buffers = take(2 * L.buffer_bytes);
  L.total = off;
  return L;
}

struct Params {
  const std::uint32_t* q = nullptr;  // [B][Hq][d/4]
  const float* q_scales = nullptr;   // [B][Hq][groups]
  const std::uint8_t *k = nullptr, *k_scales = nullptr, *v = nullptr, *v_scales = nullptr;
  const int *key_lo = nullptr, *key_hi = nullptr;  // [B]
  float *part_m = nullptr, *part_l = nullptr;      // [B][Hq][splits]
  float* part_o = nullptr;                         // [B][Hq][splits][d]
  float* out = nullptr;                            // [B][Hq][d]
  int hq = 0, hkv = 0, cap = 0, d = 0, group = 0, groups = 0, v_group = 32, v_row = 0, bc = 0, splits = 1, k_scale_bytes = 2;
  float c = 0, p_mult = 1;
  bool denominator_quantized = true;
  bool row_sum_exact = false;  // the tile's sum of quantized P is exact in fp32 in any order
  PRound pr;
  Layout lay;
};

// ---- kernel 1: one split of one (batch, kv head) ----

__device__ inline void copy_run(unsigned char* dst, const std::uint8_t* src, int bytes) {
  for (int c = threadIdx.x; 16 * c < bytes; c += blockDim.x) async_copy_16(dst + 16 * c, src + 16L * c, true);
}

// Issues the async copies of keys [j0, j0 + rows) of cache row block `bkh` into a tile buffer.
template <DecodeV VF>
__device__ inline void issue_tile(const Params& p, unsigned char* buf, long bkh, int j0, int rows) {
  const long key0 = bkh * p.cap + j0;
  // K payload: d bytes a key, into rows of k_stride bytes; consecutive threads take consecutive
  // 16-byte pieces of consecutive keys (coalesced).
  const int parts = p.d / 16, rows_per_pass = blockDim.x / parts;
  const int r0 = threadIdx.x / parts, e = threadIdx.x - r0 * parts;
  if (r0 < rows_per_pass) {
    const std::uint8_t* k = p.k + key0 * p.d + 16 * e;
    for (int r = r0; r < rows; r += rows_per_pass) async_copy_16(buf + r * p.lay.k_stride + 16 * e, k + static_cast<long>(r) * p.d, true);
  }
  // K scales, V codes, V scales: contiguous runs, copied whole.
  copy_run(buf + p.lay.k_scales, p.k_scales + key0 * p.groups * p.k_scale_bytes, rows * p.groups * p.k_scale_bytes);
  copy_run(buf + p.lay.v, p.v + key0 * p.v_row, rows * p.v_row);
  if (VF != DecodeV::e4m3) {
    const int vg = p.d / p.v_group;
    copy_run(buf + p.lay.v_scales, p.v_scales + key0 * vg * 2, rows * vg * 2);
  }
}

// The raw score of one (query row, key): one int dot per scale block, scaled and summed in fp32 in
// block order, as the emulator's Scorer (one block: float(dot) * (sq * sk), the same value).
__device__ inline float raw_score(const Params& p, const std::int8_t* q_row, const float* q_scales, const unsigned char* k_row,
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

// H: query heads per PV work item (4, 2 or 1, dividing the group); kFused: P * v is exact in fp32,
// so fmaf rounds as the emulator's multiply-then-add (decode_pv_products_exact).
template <DecodeV VF, int H, bool kFused>
__global__ void __launch_bounds__(kMaxThreads, 4) decode_split_kernel(Params p) {
  extern __shared__ uint4 shared_vec[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(shared_vec);
  const int tid = threadIdx.x, nt = blockDim.x;
  const int lane = tid % kWaveSize, wave = tid / kWaveSize, waves = nt / kWaveSize;
  const int split = blockIdx.x, kh = blockIdx.y, b = blockIdx.z;
  const int G = p.hq / p.hkv, d = p.d, bc = p.bc;
  const long bkh = static_cast<long>(b) * p.hkv + kh;                     // (batch, kv head)
  const long bh0 = static_cast<long>(b) * p.hq + static_cast<long>(kh) * G;  // its first query head

  std::int8_t* qs = reinterpret_cast<std::int8_t*>(sm + p.lay.q);  // [G][d]
  float* qsc = reinterpret_cast<float*>(sm + p.lay.q_scales);        // [G][groups]
  float* S = reinterpret_cast<float*>(sm + p.lay.s);                 // [G][bc]
  float* P = reinterpret_cast<float*>(sm + p.lay.p);                 // [bc][G]
  float* O = reinterpret_cast<float*>(sm + p.lay.o);                 // [G][d]
  float* M = reinterpret_cast<float*>(sm + p.lay.m);
  float* L = reinterpret_cast<float*>(sm + p.lay.l);
  float* A = reinterpret_cast<float*>(sm + p.lay.a);
  float* vch = reinterpret_cast<float*>(sm + p.lay.v_channel);       // e4m3: [d]
  float* vgs = reinterpret_cast<float*>(sm + p.lay.v_group_scales);  // q8_0 / q4_0: the tile's V scales [bc][d / v_group]
  unsigned char* const buffers = sm + p.lay.buffers;  // tile i of the split in buffer i % 2

  // The split's key tiles, as RowEmulator::start assigns them: per_split = ceil(tiles / splits).
  const int lo = p.key_lo[b], hi = p.key_hi[b];
  const int t_first = lo / bc, t_end = max(t_first, (hi + bc - 1) / bc);
  const int per = max(1, (t_end - t_first + p.splits - 1) / p.splits);
  const int ta = min(t_end, t_first + split * per), tb = min(t_end, ta + per);

  // The group's query rows and scales, V's channel scales, the running state.
  {
    const uint4* src = reinterpret_cast<const uint4*>(p.q + bh0 * (d / 4));
    uint4* dst = reinterpret_cast<uint4*>(qs);
    for (int i = tid; i < G * d / 16; i += nt) dst[i] = src[i];
  }
  for (int i = tid; i < G * p.groups; i += nt) qsc[i] = p.q_scales[bh0 * p.groups + i];
  if (VF == DecodeV::e4m3) {
    for (int c = tid; c < d; c += nt) vch[c] = reinterpret_cast<const float*>(p.v_scales)[bkh * d + c];
  }
  for (int g = tid; g < G; g += nt) {
    M[g] = -INFINITY;
    L[g] = 0.0f;
    A[g] = 1.0f;
  }
  for (int i = tid; i < G * d; i += nt) O[i] = 0.0f;
  if (ta < tb) issue_tile<VF>(p, buffers, bkh, ta * bc, min(hi, ta * bc + bc) - ta * bc);
  async_commit();

  const int items = d * (G / H), vgroups = d / p.v_group;
  for (int t = ta; t < tb; ++t) {
    const int j0 = t * bc;
    const int jlo = max(lo - j0, 0), jhi = min(hi - j0, bc);  // keys of the tile the query sees
    const unsigned char* cur = buffers + ((t - ta) & 1) * p.lay.buffer_bytes;
    async_wait<0>();
    __syncthreads();  // tile t has landed; every thread is done with tile t - 1 and its buffer
    if (t + 1 < tb) issue_tile<VF>(p, buffers + ((t - ta + 1) & 1) * p.lay.buffer_bytes, bkh, j0 + bc, min(hi, j0 + 2 * bc) - (j0 + bc));
    async_commit();

    // S = Q K^T for every (query head, key) of the tile; invisible keys are -inf.
    const unsigned char* ks = cur + p.lay.k_scales;
    for (int pair = tid; pair < G * bc; pair += nt) {
      const int g = pair / bc, jj = pair - g * bc;
      float s = -INFINITY;
      if (jj >= jlo && jj < jhi) {
        s = raw_score(p, qs + g * d, qsc + g * p.groups, cur + jj * p.lay.k_stride, ks + jj * p.groups * p.k_scale_bytes) * p.c;
      }
      S[pair] = s;
    }
    if (VF != DecodeV::e4m3) {  // the tile's V scales, decoded once (read after two barriers)
      const std::uint16_t* vs16 = reinterpret_cast<const std::uint16_t*>(cur + p.lay.v_scales);
      for (int i = tid; i < jhi * vgroups; i += nt) vgs[i] = decode_fp16_bits(vs16[i]);
    }
    __syncthreads();

    // Online softmax, one wave per query head: P against the running max, quantized.
    for (int g = wave; g < G; g += waves) {
      float* srow = S + g * bc;
      float tile_max = -INFINITY;
      for (int jj = lane; jj < bc; jj += kWaveSize) tile_max = fmaxf(tile_max, srow[jj]);
      tile_max = wave_max(tile_max);
      const float m_old = M[g], m_new = fmaxf(m_old, tile_max);
      float alpha = 1.0f, row_sum = 0.0f;
      if (m_new != -INFINITY) {  // always: every tile of the range holds a visible key
        alpha = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
        for (int jj = lane; jj < bc; jj += kWaveSize) {
          const float s = srow[jj];
          const float pf = s == -INFINITY ? 0.0f : exp2f(s - m_new);
          const float pq = round_p(p.pr, pf * p.p_mult);
          P[jj * G + g] = pq;
          const float term = p.denominator_quantized ? pq : pf;
          row_sum += term;
          if (!p.row_sum_exact) srow[jj] = term;  // for the in-order sum below
        }
      } else {
        for (int jj = lane; jj < bc; jj += kWaveSize) P[jj * G + g] = srow[jj] = 0.0f;
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
    __syncthreads();

    // O = O * alpha, then O += P V key by key: item = (channel, H query heads); each V element is
    // dequantized once for the H heads.
    const unsigned char* vrows = cur + p.lay.v;
    for (int item = tid; item < items; item += nt) {
      const int c = item % d, g0 = (item / d) * H;
      float acc[H];
#pragma unroll
      for (int h = 0; h < H; ++h) acc[h] = O[(g0 + h) * d + c] * A[g0 + h];
      const float s_channel = VF == DecodeV::e4m3 ? vch[c] : 1.0f;
      const int byte = VF == DecodeV::q4_0 ? c / 2 : c, shift = VF == DecodeV::q4_0 ? 4 * (c & 1) : 0, vs = c / p.v_group;
      for (int jj = jlo; jj < jhi; ++jj) {
        const std::uint32_t x = vrows[jj * p.v_row + byte];
        float v;
        if constexpr (VF == DecodeV::e4m3) {
          v = decode_e4m3_bits(x) * s_channel;
        } else if constexpr (VF == DecodeV::q8_0) {
          v = decode_int8_bits(x) * vgs[jj * vgroups + vs];
        } else {
          v = decode_int4_bits((x >> shift) & 0xFu) * vgs[jj * vgroups + vs];
        }
        const float* pr = P + jj * G + g0;
        float pj[H];
        if constexpr (H == 4) {
          const float4 x4 = *reinterpret_cast<const float4*>(pr);
          pj[0] = x4.x;
          pj[1] = x4.y;
          pj[2] = x4.z;
          pj[3] = x4.w;
        } else if constexpr (H == 2) {
          const float2 x2 = *reinterpret_cast<const float2*>(pr);
          pj[0] = x2.x;
          pj[1] = x2.y;
        } else {
          pj[0] = pr[0];
        }
#pragma unroll
        for (int h = 0; h < H; ++h) acc[h] = kFused ? fmaf(pj[h], v, acc[h]) : acc[h] + pj[h] * v;
      }
#pragma unroll
      for (int h = 0; h < H; ++h) O[(g0 + h) * d + c] = acc[h];
    }
  }
  __syncthreads();

  // The split's partial (m, l, o) per query head; an empty split leaves (-inf, 0, 0).
  for (int g = tid; g < G; g += nt) {
    const long slot = (bh0 + g) * p.splits + split;
    p.part_m[slot] = M[g];
    p.part_l[slot] = L[g];
  }
  for (int i = tid; i < G * d; i += nt) {
    const int g = i / d, c = i - g * d;
    p.part_o[((bh0 + g) * p.splits + split) * d + c] = O[i];
  }
}

// ---- kernel 2: merge the splits of one (batch, query head) and normalize ----

__global__ void __launch_bounds__(1024) decode_merge_kernel(Params p) {
  const long bh = blockIdx.x;
  const float* m = p.part_m + bh * p.splits;
  const float* l = p.part_l + bh * p.splits;
  float mx = -INFINITY;
  for (int k = 0; k < p.splits; ++k) mx = fmaxf(mx, m[k]);
  for (int c = threadIdx.x; c < p.d; c += blockDim.x) {
    float lsum = 0.0f, o = 0.0f;
    for (int k = 0; k < p.splits; ++k) {
      const float f = m[k] == -INFINITY ? 0.0f : exp2f(m[k] - mx);
      lsum = lsum + f * l[k];
      o = o + f * p.part_o[(bh * p.splits + k) * p.d + c];
    }
    const float denom = p.denominator_quantized ? lsum : lsum * p.p_mult;
    p.out[bh * p.d + c] = o / denom;
  }
}

// ---- test hooks and the benchmark's random inputs ----

__global__ void decode_codes_kernel(int which, const std::uint32_t* codes, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t c = codes[i];
  out[i] = which == 0 ? decode_e4m3_bits(c) : which == 1 ? decode_fp16_bits(c) : which == 2 ? decode_int8_bits(c) : decode_int4_bits(c & 0xFu);
}

__global__ void round_p_kernel(PRound r, float mult, const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = round_p(r, x[i] * mult);
}

enum Fill : int { kFillBytes, kFillE4m3, kFillFp16Scale, kFillFp32Scale };

__device__ inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_random_kernel(std::uint32_t* dst, std::size_t words, std::uint64_t seed, int kind) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    std::uint32_t w = static_cast<std::uint32_t>(mix64(seed + 0x9E3779B97F4A7C15ull * (i + 1)));
    if (kind == kFillE4m3) {
      for (int k = 0; k < 4; ++k)
        if (((w >> (8 * k)) & 0x7Fu) == 0x7Fu) w ^= 1u << (8 * k);  // no NaN codes: S.1111.111 -> S.1111.110
    } else if (kind == kFillFp16Scale) {
      // Two positive fp16 scales in [2^-9, 2^-6): exponent field 6..8, random mantissa.
      std::uint32_t r = 0;
      for (int k = 0; k < 2; ++k) {
        const std::uint32_t h = w >> (16 * k);
        r |= ((((6u + (h >> 10) % 3u) << 10) | (h & 0x3FFu)) & 0xFFFFu) << (16 * k);
      }
      w = r;
    } else if (kind == kFillFp32Scale) {
      w = (118u << 23) | (w & 0x7FFFFFu);  // [2^-9, 2^-8), all 24 significant bits
    }
    dst[i] = w;
  }
}

// ---- host side ----

int round_up(int x, int q) { return (x + q - 1) / q * q; }

int heads_per_item(int group_heads) { return group_heads % 4 == 0 ? 4 : group_heads % 2 == 0 ? 2 : 1; }

bool is_fp16_value(float x) {
  const Format h = format_of(FormatId::fp16);
  return std::isfinite(x) && static_cast<double>(x) == decode(h, encode(h, x));
}

std::uint16_t fp16_bits(float x) { return static_cast<std::uint16_t>(encode(format_of(FormatId::fp16), x)); }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("flash_decode: " + what);
}

void check_inputs(const DecodeInputs& in) {
  require(in.batch >= 1 && in.q_heads >= 1 && in.kv_heads >= 1 && in.tokens >= 1,
          "batch, heads and tokens must be positive (got batch " + std::to_string(in.batch) + ", heads " + std::to_string(in.q_heads) + "/" +
              std::to_string(in.kv_heads) + ", tokens " + std::to_string(in.tokens) + ")");
  require(in.q_heads % in.kv_heads == 0, "query heads " + std::to_string(in.q_heads) + " must be a multiple of kv heads " + std::to_string(in.kv_heads));
  require(in.dim % 32 == 0 && in.dim >= kMinDim && in.dim <= kMaxDim,
          "head dim " + std::to_string(in.dim) + " must be a multiple of 32 in [32, 256]");
  require(in.group > 0 && in.dim % in.group == 0 && in.group % 16 == 0,
          "Q/K scale group " + std::to_string(in.group) + " must be a multiple of 16 dividing the head dim " + std::to_string(in.dim));
  require(in.block_k % 16 == 0 && in.block_k >= 16 && in.block_k <= kMaxTile,
          "key tile " + std::to_string(in.block_k) + " must be a multiple of 16 in [16, 256]");
  require(in.split_k >= 1, "split_k must be >= 1");
  require(in.p_format != FormatId::e8m0, "P in e8m0 is not a P format");
  require(in.p_multiplier > 0 && std::isfinite(in.p_multiplier), "the P multiplier must be positive and finite");
  if (in.v_format != DecodeV::e4m3) {
    require(in.v_group >= 2 && in.v_group % 2 == 0 && in.dim % in.v_group == 0,
            "V scale group " + std::to_string(in.v_group) + " must be even and divide the head dim");
  }
  const std::size_t B = in.batch, hq = in.q_heads, hkv = in.kv_heads, n = in.tokens, d = in.dim, groups = in.dim / in.group;
  const auto size_is = [](std::size_t got, std::size_t want, const char* what) {
    require(got == want, std::string(what) + " has " + std::to_string(got) + " elements; expected " + std::to_string(want));
  };
  size_is(in.q_codes.size(), B * hq * d, "q_codes");
  size_is(in.q_scales.size(), B * hq * groups, "q_scales");
  size_is(in.k_codes.size(), B * hkv * n * d, "k_codes");
  size_is(in.k_scales.size(), B * hkv * n * groups, "k_scales");
  size_is(in.v_codes.size(), B * hkv * n * d, "v_codes");
  size_is(in.v_scales.size(), in.v_format == DecodeV::e4m3 ? B * hkv * d : B * hkv * n * (d / in.v_group), "v_scales");
  size_is(in.key_lo.size(), B, "key_lo");
  size_is(in.key_hi.size(), B, "key_hi");
  for (std::size_t b = 0; b < B; ++b) {
    require(in.key_lo[b] >= 0 && in.key_lo[b] < in.key_hi[b] && in.key_hi[b] <= in.tokens,
            "batch entry " + std::to_string(b) + ": keys [" + std::to_string(in.key_lo[b]) + ", " + std::to_string(in.key_hi[b]) +
                ") must be a non-empty range inside [0, " + std::to_string(in.tokens) + ")");
  }
}

std::vector<std::uint32_t> pack_words(const std::int8_t* codes, std::size_t count) {
  std::vector<std::uint32_t> words(count / 4);
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint32_t x = 0;
    for (int k = 0; k < 4; ++k) x |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(codes[4 * w + k])) << (8 * k);
    words[w] = x;
  }
  return words;
}

template <typename T>
const std::uint8_t* upload_padded(DeviceBuffers& mem, const std::vector<T>& host) {
  const std::size_t bytes = sizeof(T) * host.size();
  std::uint8_t* dev = mem.alloc<std::uint8_t>(bytes + kArrayPad);
  fill_bytes(dev + bytes, 0, kArrayPad);
  copy_to_device(dev, host.data(), bytes);
  return dev;
}

using SplitKernel = void (*)(Params);

template <DecodeV VF>
SplitKernel split_kernel_for(int h, bool fused) {
  switch (h) {
    case 4: return fused ? decode_split_kernel<VF, 4, true> : decode_split_kernel<VF, 4, false>;
    case 2: return fused ? decode_split_kernel<VF, 2, true> : decode_split_kernel<VF, 2, false>;
    default: return fused ? decode_split_kernel<VF, 1, true> : decode_split_kernel<VF, 1, false>;
  }
}

SplitKernel split_kernel_for(DecodeV vf, int h, bool fused) {
  switch (vf) {
    case DecodeV::e4m3: return split_kernel_for<DecodeV::e4m3>(h, fused);
    case DecodeV::q8_0: return split_kernel_for<DecodeV::q8_0>(h, fused);
    case DecodeV::q4_0: return split_kernel_for<DecodeV::q4_0>(h, fused);
  }
  return nullptr;
}

// The launch of one decode: the kernel, its shape and its parameters (device pointers filled by the caller).
struct Launch {
  Params p;
  SplitKernel kernel = nullptr;
  dim3 grid;
  int threads = 0, merge_threads = 0, merge_blocks = 0;
  bool fused = false;
};

Launch plan(int batch, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
            float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k, bool fused,
            const DecodeTuning& tuning) {
  const int ws = wave_size();
  require(tuning.threads % ws == 0 && tuning.threads >= ws && tuning.threads <= kMaxThreads,
          "tuning.threads " + std::to_string(tuning.threads) + " must be a multiple of the wave size " + std::to_string(ws) + ", at most " +
              std::to_string(kMaxThreads));
  require(tuning.merge_threads % ws == 0 && tuning.merge_threads >= ws && tuning.merge_threads <= 1024,
          "tuning.merge_threads " + std::to_string(tuning.merge_threads) + " must be a multiple of the wave size, at most 1024");
  Launch l;
  Params& p = l.p;
  p.hq = q_heads;
  p.hkv = kv_heads;
  p.cap = capacity;
  p.d = dim;
  p.group = group;
  p.groups = dim / group;
  p.v_group = vf == DecodeV::e4m3 ? 32 : v_group;
  p.v_row = vf == DecodeV::q4_0 ? dim / 2 : dim;
  p.bc = block_k;
  p.splits = split_k;
  p.k_scale_bytes = k_scales_fp16 ? 2 : 4;
  p.c = score_factor;
  p.p_mult = p_multiplier;
  p.denominator_quantized = denominator_quantized;
  p.pr = p_round_of(p_format);
  {
    // Quantized P values are multiples of the format's quantum, at most the multiplier: when a tile's
    // sum stays below 2^24 quanta, every partial sum is exact and a tree sum equals the emulator's
    // key-by-key sum (e4m3 * 448 with Bc <= 64, int8 * 127 with any Bc); otherwise the sum runs in order.
    const Format pf = format_of(p_format);
    const double p_max = std::min(max_finite(pf), 2.0 * p_multiplier);  // P <= 1 before the multiplier; rounding up stays below 2x
    p.row_sum_exact = denominator_quantized && static_cast<double>(block_k) * p_max / min_subnormal(pf) <= 0x1p24;
  }
  const int group_heads = q_heads / kv_heads, h = heads_per_item(group_heads);
  p.lay = layout_of(group_heads, dim, p.groups, p.k_scale_bytes, block_k, vf, p.v_row, p.v_group);
  l.kernel = split_kernel_for(vf, h, fused);
  l.grid = dim3(split_k, kv_heads, batch);
  l.threads = tuning.threads;
  l.merge_threads = tuning.merge_threads;
  l.merge_blocks = batch * q_heads;
  l.fused = fused;
  return l;
}

// Both kernels, no synchronization (the caller checks).
void launch(const Launch& l) {
  if (l.p.lay.total > 48 * 1024) allow_shared_bytes(l.kernel, l.p.lay.total);
  l.kernel<<<l.grid, l.threads, l.p.lay.total>>>(l.p);
  decode_merge_kernel<<<l.merge_blocks, l.merge_threads>>>(l.p);
}

int significant_bits(float x) {
  const std::uint32_t m = (__builtin_bit_cast(std::uint32_t, x) & 0x7FFFFFu) | 0x800000u;
  return 24 - __builtin_ctz(m);
}

}  // namespace

const char* decode_v_name(DecodeV v) {
  switch (v) {
    case DecodeV::e4m3: return "e4m3";
    case DecodeV::q8_0: return "q8_0";
    case DecodeV::q4_0: return "q4_0";
  }
  return "?";
}

bool decode_pv_products_exact(FormatId p_format, DecodeV v_format, const std::vector<float>& v_scales) {
  const Format pf = format_of(p_format);
  if (pf.specials == Specials::e8m0) return false;
  const int p_bits = pf.kind == Kind::integer ? pf.man_bits : pf.man_bits + 1;
  const double p_min = min_subnormal(pf), p_max = max_finite(pf);
  const int code_bits = v_format == DecodeV::e4m3 ? 4 : v_format == DecodeV::q8_0 ? 7 : 3;
  const double code_min = v_format == DecodeV::e4m3 ? 0x1p-9 : 1.0, code_max = v_format == DecodeV::e4m3 ? 448.0 : v_format == DecodeV::q8_0 ? 128.0 : 8.0;
  int scale_bits = 1;
  double s_min = 1, s_max = 1;
  for (std::size_t i = 0; i < v_scales.size(); ++i) {
    const float s = v_scales[i];
    if (!(s >= 0x1p-126f) || !std::isfinite(s)) return false;  // zero, negative, subnormal or not finite
    scale_bits = std::max(scale_bits, significant_bits(s));
    s_min = i == 0 ? s : std::min<double>(s_min, s);
    s_max = i == 0 ? s : std::max<double>(s_max, s);
  }
  // Exact when the product's significand fits fp32's 24 bits and every nonzero product is normal.
  return p_bits + code_bits + scale_bits <= 24 && p_min * code_min * s_min >= 0x1p-126 && p_max * code_max * s_max <= 0x1p100;
}

PackedDecodeCache pack_decode_cache(const DecodeInputs& in) {
  check_inputs(in);
  const std::size_t B = in.batch, hq = in.q_heads, hkv = in.kv_heads, n = in.tokens, d = in.dim, groups = in.dim / in.group;
  const std::size_t cap = static_cast<std::size_t>(round_up(in.tokens, kDecodeCapacityQuantum));
  PackedDecodeCache pk;
  pk.capacity = static_cast<int>(cap);
  pk.k_scales_fp16 = std::all_of(in.k_scales.begin(), in.k_scales.end(), is_fp16_value);
  pk.q = pack_words(in.q_codes.data(), B * hq * d);
  pk.q_scales = in.q_scales;
  const std::size_t ksb = pk.k_scales_fp16 ? 2 : 4;
  pk.k.assign(B * hkv * cap * d / 4, 0u);
  pk.k_scales.assign(B * hkv * cap * groups * ksb, 0);
  const std::size_t v_row = in.v_format == DecodeV::q4_0 ? d / 2 : d, vg = in.v_format == DecodeV::e4m3 ? 0 : d / in.v_group;
  pk.v.assign(B * hkv * cap * v_row, 0);
  for (std::size_t r = 0; r < B * hkv; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t src = r * n + j, dst = r * cap + j;
      const std::vector<std::uint32_t> words = pack_words(in.k_codes.data() + src * d, d);
      std::copy(words.begin(), words.end(), pk.k.begin() + static_cast<long>(dst * d / 4));
      for (std::size_t g = 0; g < groups; ++g) {
        const float s = in.k_scales[src * groups + g];
        std::uint8_t* at = pk.k_scales.data() + (dst * groups + g) * ksb;
        if (ksb == 2) {
          const std::uint16_t h = fp16_bits(s);
          std::memcpy(at, &h, 2);
        } else {
          std::memcpy(at, &s, 4);
        }
      }
      const std::uint8_t* codes = in.v_codes.data() + src * d;
      std::uint8_t* row = pk.v.data() + dst * v_row;
      if (in.v_format == DecodeV::q4_0) {
        for (std::size_t i = 0; i < d / 2; ++i) row[i] = static_cast<std::uint8_t>((codes[2 * i] & 0xFu) | ((codes[2 * i + 1] & 0xFu) << 4));
      } else {
        std::copy(codes, codes + d, row);
      }
    }
  }
  if (in.v_format == DecodeV::e4m3) {
    pk.v_scales.resize(in.v_scales.size() * 4);
    std::memcpy(pk.v_scales.data(), in.v_scales.data(), pk.v_scales.size());
  } else {
    pk.v_scales.assign(B * hkv * cap * vg * 2, 0);
    for (std::size_t r = 0; r < B * hkv; ++r)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t g = 0; g < vg; ++g) {
          const float s = in.v_scales[(r * n + j) * vg + g];
          require(is_fp16_value(s), std::string("V scales of ") + decode_v_name(in.v_format) + " are fp16 values; got " + std::to_string(s));
          const std::uint16_t h = fp16_bits(s);
          std::memcpy(pk.v_scales.data() + ((r * cap + j) * vg + g) * 2, &h, 2);
        }
  }
  return pk;
}

std::vector<float> flash_decode(const DecodeInputs& in, const DecodeTuning& tuning) {
  const PackedDecodeCache pk = pack_decode_cache(in);
  const bool fused = decode_pv_products_exact(in.p_format, in.v_format, in.v_scales);
  Launch l = plan(in.batch, in.q_heads, in.kv_heads, pk.capacity, in.dim, in.group, pk.k_scales_fp16, in.v_format, in.v_group, in.score_factor,
                  in.p_format, in.p_multiplier, in.denominator_quantized, in.block_k, in.split_k, fused, tuning);
  DeviceBuffers mem;
  Params& p = l.p;
  p.q = reinterpret_cast<const std::uint32_t*>(upload_padded(mem, pk.q));
  p.q_scales = reinterpret_cast<const float*>(upload_padded(mem, pk.q_scales));
  p.k = upload_padded(mem, pk.k);
  p.k_scales = upload_padded(mem, pk.k_scales);
  p.v = upload_padded(mem, pk.v);
  p.v_scales = upload_padded(mem, pk.v_scales);
  p.key_lo = mem.upload(in.key_lo);
  p.key_hi = mem.upload(in.key_hi);
  const std::size_t bh = static_cast<std::size_t>(in.batch) * in.q_heads, slots = bh * in.split_k, count = bh * in.dim;
  // NaN everywhere: a partial or an output element that no thread writes shows in the result.
  float* part = mem.alloc<float>(slots * (in.dim + 2));
  fill_bytes(part, 0xFF, sizeof(float) * slots * (in.dim + 2));
  float* out = mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);
  p.part_m = part;
  p.part_l = part + slots;
  p.part_o = part + 2 * slots;
  p.out = out;
  launch(l);
  check_launch("flash_decode (split + merge kernels)");
  return download(out, count);
}

std::string decode_not_covered(const Problem& p, const Recipe& r) {
  for (const auto* o : {&r.q, &r.k}) {
    const Granularity g = o->spec.granularity;
    if (o->unit_scale || o->spec.format != FormatId::int8 || g == Granularity::channel) {
      return "QK^T: the decode kernel takes int8 Q and K with a scale per tensor, head, token, block of tokens or group of channels";
    }
  }
  const bool q_group = r.q.spec.granularity == Granularity::group, k_group = r.k.spec.granularity == Granularity::group;
  if (q_group != k_group || (k_group && r.q.spec.block != r.k.spec.block)) return "QK^T: group scales need the same group on Q and K";
  if (k_group && (r.k.spec.block % 16 != 0 || r.k.spec.block <= 0 || p.q.dim % r.k.spec.block != 0)) {
    return "QK^T: the scale group must be a multiple of 16 channels dividing the head dim";
  }
  if (r.k_smoothing != KSmoothing::none || r.q_smoothing || r.v_smoothing || r.rotation != Rotation::none) {
    return "the decode kernel takes no smoothing or rotation (flash_dot4 runs them, split-K included)";
  }
  if (r.softmax != SoftmaxKind::float_online) return "integer softmaxes have no decode kernel";
  if (r.lazy_rescale_tau != 0) return "lazy rescale has no decode kernel";
  if (!r.p.unit_scale && r.p.spec.rule != ScaleRule::static_multiplier) return "P needs a static multiplier";
  if (r.p.spec.format == FormatId::e8m0) return "P cannot be e8m0";
  if (r.qk_acc.kind != Accumulator::Kind::exact || r.pv_acc.kind != Accumulator::Kind::fp32) {
    return "the decode kernel accumulates QK^T exactly (int32) and PV in fp32";
  }
  const Granularity vg = r.v.spec.granularity;
  const bool v_e4m3 = r.v.spec.format == FormatId::e4m3 &&
                      (r.v.unit_scale || vg == Granularity::tensor || vg == Granularity::head || vg == Granularity::channel);
  const bool v_q = (r.v.spec.format == FormatId::int8 || r.v.spec.format == FormatId::int4) && !r.v.unit_scale && vg == Granularity::group &&
                   r.v.spec.block >= 2 && r.v.spec.block % 2 == 0 && p.q.dim % r.v.spec.block == 0 && r.v.spec.scale_format == FormatId::fp16;
  if (!v_e4m3 && !v_q) {
    return "V: the decode kernel reads e4m3 (unit scale, or a tensor, head or channel scale), or q8_0 / q4_0 (int8 / int4 with an fp16 "
           "scale per even group of channels)";
  }
  if (r.tiles.block_k % 16 != 0 || r.tiles.block_k < 16 || r.tiles.block_k > kMaxTile) return "the key tile must be a multiple of 16, at most 256";
  if (p.q.dim % 32 != 0 || p.q.dim < kMinDim || p.q.dim > kMaxDim) return "the head dim must be a multiple of 32 in [32, 256]";
  std::size_t rows = 0;
  try {
    rows = p.rows.resolve(p.q.tokens).size();
  } catch (const std::invalid_argument& e) {
    return std::string("rows: ") + e.what();
  }
  if (rows != 1) return "decode evaluates one query row per head (select one row, the last token)";
  return "";
}

DecodeInputs make_decode_inputs(const Problem& p, const Recipe& r) {
  validate(p);
  validate(r);
  const std::string why = decode_not_covered(p, r);
  if (!why.empty()) throw std::invalid_argument("flash_decode: recipe not covered: " + why);
  const int i = p.rows.resolve(p.q.tokens).front();
  DecodeInputs in;
  in.batch = 1;
  in.q_heads = p.q.heads;
  in.kv_heads = p.k.heads;
  in.tokens = p.k.tokens;
  in.dim = p.q.dim;
  in.group = r.k.spec.granularity == Granularity::group ? r.k.spec.block : p.q.dim;
  const int d = in.dim, n = in.tokens, groups = d / in.group;
  const Format i8 = format_of(FormatId::int8);
  const QuantizedTensor q = quantize(p.q, r.q.spec), k = quantize(p.k, r.k.spec);
  for (int h = 0; h < p.q.heads; ++h) {
    for (int c = 0; c < d; ++c) in.q_codes.push_back(static_cast<std::int8_t>(decode(i8, q.codes[p.q.index(h, i, c)])));
    for (int g = 0; g < groups; ++g) in.q_scales.push_back(q.scales[q.scale_index(h, i, g * in.group)]);
  }
  in.k_codes.reserve(k.codes.size());
  for (auto c : k.codes) in.k_codes.push_back(static_cast<std::int8_t>(decode(i8, c)));
  for (int h = 0; h < p.k.heads; ++h)
    for (int j = 0; j < n; ++j)
      for (int g = 0; g < groups; ++g) in.k_scales.push_back(k.scales[k.scale_index(h, j, g * in.group)]);
  // V: codes and scales whose decode(code) * scale is the emulator's V value.
  const Format vf = format_of(r.v.spec.format);
  if (r.v.spec.format == FormatId::e4m3) {
    in.v_format = DecodeV::e4m3;
    if (r.v.unit_scale) {
      for (float x : p.v.data) in.v_codes.push_back(static_cast<std::uint8_t>(encode(vf, x)));  // round_to = decode(encode(x))
      in.v_scales.assign(static_cast<std::size_t>(p.v.heads) * d, 1.0f);
    } else {
      const QuantizedTensor v = quantize(p.v, r.v.spec);
      for (auto c : v.codes) in.v_codes.push_back(static_cast<std::uint8_t>(c));
      for (int h = 0; h < p.v.heads; ++h)
        for (int c = 0; c < d; ++c) in.v_scales.push_back(v.scales[v.scale_index(h, 0, c)]);
    }
  } else {
    in.v_format = r.v.spec.format == FormatId::int8 ? DecodeV::q8_0 : DecodeV::q4_0;
    in.v_group = r.v.spec.block;
    const QuantizedTensor v = quantize(p.v, r.v.spec);
    for (auto c : v.codes) in.v_codes.push_back(static_cast<std::uint8_t>(c));
    for (int h = 0; h < p.v.heads; ++h)
      for (int j = 0; j < n; ++j)
        for (int g = 0; g < d / in.v_group; ++g) in.v_scales.push_back(v.scales[v.scale_index(h, j, g * in.v_group)]);
  }
  const auto [lo, hi] = p.visible_keys(i);
  in.key_lo = {lo};
  in.key_hi = {hi};
  in.score_factor = static_cast<float>(p.scale()) * kLog2e;
  in.p_format = r.p.spec.format;
  in.p_multiplier = r.p.unit_scale ? 1.0f : static_cast<float>(r.p.spec.multiplier);
  in.denominator_quantized = r.denominator == Denominator::quantized_p;
  in.block_k = r.tiles.block_k;
  in.split_k = r.split_k;
  return in;
}

DecodeInputs stack_decode_inputs(const std::vector<DecodeInputs>& parts) {
  require(!parts.empty(), "stack_decode_inputs: no batch entries");
  DecodeInputs out = parts.front();
  out.batch = 0;
  out.tokens = 0;
  for (const DecodeInputs& x : parts) {
    check_inputs(x);
    require(x.q_heads == out.q_heads && x.kv_heads == out.kv_heads && x.dim == out.dim && x.group == out.group && x.v_format == out.v_format &&
                x.v_group == out.v_group && x.score_factor == out.score_factor && x.p_format == out.p_format &&
                x.p_multiplier == out.p_multiplier && x.denominator_quantized == out.denominator_quantized && x.block_k == out.block_k &&
                x.split_k == out.split_k,
            "stack_decode_inputs: batch entries differ in heads, dim, formats, softmax scale, tile or split_k");
    out.batch += x.batch;
    out.tokens = std::max(out.tokens, x.tokens);
  }
  const std::size_t n = out.tokens, d = out.dim, groups = out.dim / out.group, vg = out.v_format == DecodeV::e4m3 ? 0 : out.dim / out.v_group;
  out.q_codes.clear();
  out.q_scales.clear();
  out.k_codes.clear();
  out.k_scales.clear();
  out.v_codes.clear();
  out.v_scales.clear();
  out.key_lo.clear();
  out.key_hi.clear();
  for (const DecodeInputs& x : parts) {
    out.q_codes.insert(out.q_codes.end(), x.q_codes.begin(), x.q_codes.end());
    out.q_scales.insert(out.q_scales.end(), x.q_scales.begin(), x.q_scales.end());
    out.key_lo.insert(out.key_lo.end(), x.key_lo.begin(), x.key_lo.end());
    out.key_hi.insert(out.key_hi.end(), x.key_hi.begin(), x.key_hi.end());
    if (out.v_format == DecodeV::e4m3) out.v_scales.insert(out.v_scales.end(), x.v_scales.begin(), x.v_scales.end());
    const std::size_t xn = x.tokens;
    for (std::size_t r = 0; r < static_cast<std::size_t>(x.batch) * x.kv_heads; ++r) {
      // The entry's keys, then zero codes and unit scales up to the common length.
      out.k_codes.insert(out.k_codes.end(), x.k_codes.begin() + static_cast<long>(r * xn * d), x.k_codes.begin() + static_cast<long>((r + 1) * xn * d));
      out.k_codes.insert(out.k_codes.end(), (n - xn) * d, 0);
      out.k_scales.insert(out.k_scales.end(), x.k_scales.begin() + static_cast<long>(r * xn * groups),
                          x.k_scales.begin() + static_cast<long>((r + 1) * xn * groups));
      out.k_scales.insert(out.k_scales.end(), (n - xn) * groups, 1.0f);
      out.v_codes.insert(out.v_codes.end(), x.v_codes.begin() + static_cast<long>(r * xn * d), x.v_codes.begin() + static_cast<long>((r + 1) * xn * d));
      out.v_codes.insert(out.v_codes.end(), (n - xn) * d, 0);
      if (out.v_format != DecodeV::e4m3) {
        out.v_scales.insert(out.v_scales.end(), x.v_scales.begin() + static_cast<long>(r * xn * vg),
                            x.v_scales.begin() + static_cast<long>((r + 1) * xn * vg));
        out.v_scales.insert(out.v_scales.end(), (n - xn) * vg, 1.0f);
      }
    }
  }
  check_inputs(out);
  return out;
}

std::vector<float> device_decode_codes(FormatId f, const std::vector<std::uint32_t>& codes) {
  int which = -1;
  switch (f) {
    case FormatId::e4m3: which = 0; break;
    case FormatId::fp16: which = 1; break;
    case FormatId::int8: which = 2; break;
    case FormatId::int4: which = 3; break;
    default: throw std::invalid_argument(std::string("device_decode_codes: the decode kernels decode e4m3, fp16, int8 and int4, not ") + name_of(f));
  }
  if (codes.empty()) return {};
  DeviceBuffers mem;
  const std::uint32_t* dev = mem.upload(codes);
  float* out = mem.alloc<float>(codes.size());
  const int n = static_cast<int>(codes.size());
  decode_codes_kernel<<<(n + 255) / 256, 256>>>(which, dev, out, n);
  check_launch("decode_codes_kernel");
  return download(out, codes.size());
}

std::vector<float> device_round_p(FormatId f, float multiplier, const std::vector<float>& x) {
  require(f != FormatId::e8m0, "device_round_p: P in e8m0 is not a P format");
  if (x.empty()) return {};
  DeviceBuffers mem;
  const float* dev = mem.upload(x);
  float* out = mem.alloc<float>(x.size());
  const int n = static_cast<int>(x.size());
  round_p_kernel<<<(n + 255) / 256, 256>>>(p_round_of(f), multiplier, dev, out, n);
  check_launch("round_p_kernel");
  return download(out, x.size());
}

DecodeBench bench_flash_decode(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps, const DecodeTuning& tuning) {
  require(batch >= 1 && q_heads >= 1 && kv_heads >= 1 && q_heads % kv_heads == 0 && tokens >= 1 && reps >= 1 && split_k >= 1,
          "bench: batch, heads (Hq a multiple of Hkv), tokens, split_k and reps must be positive");
  require(dim % 32 == 0 && dim >= kMinDim && dim <= kMaxDim, "bench: head dim must be a multiple of 32 in [32, 256]");
  const int group = 32, groups = dim / group, block_k = 64, cap = round_up(tokens, kDecodeCapacityQuantum), vg = 32;
  const std::size_t bkv = static_cast<std::size_t>(batch) * kv_heads, bh = static_cast<std::size_t>(batch) * q_heads;
  const std::size_t v_row = v == DecodeV::q4_0 ? dim / 2 : dim;
  // The V scales the bench draws: e4m3 per channel in fp32 (24 significant bits: no fused path),
  // q8_0 / q4_0 in fp16 over [2^-9, 2^-6).
  const std::vector<float> v_scale_sample = v == DecodeV::e4m3 ? std::vector<float>{0x1.fffffep-9f, 0x1p-9f} : std::vector<float>{0x1.ffcp-7f, 0x1p-9f};
  const bool fused = decode_pv_products_exact(FormatId::e4m3, v, v_scale_sample);
  const float c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))) * kLog2e;
  Launch l = plan(batch, q_heads, kv_heads, cap, dim, group, true, v, vg, c, FormatId::e4m3, 448.0f, true, block_k, split_k, fused, tuning);

  DecodeBench res;
  {
    DeviceBuffers mem;
    std::uint64_t seed = 0x5EEDDECull;
    const auto random_array = [&](std::size_t bytes, int kind) {
      const std::size_t words = (bytes + 3) / 4;
      auto* dev = mem.alloc<std::uint32_t>(words + kArrayPad / 4);
      fill_bytes(dev + words, 0, kArrayPad);
      const int blocks = static_cast<int>(std::min<std::size_t>(8192, (words + 255) / 256));
      fill_random_kernel<<<std::max(blocks, 1), 256>>>(dev, words, seed++, kind);
      check_launch("fill_random_kernel");
      return reinterpret_cast<const std::uint8_t*>(dev);
    };
    Params& p = l.p;
    p.q = reinterpret_cast<const std::uint32_t*>(random_array(bh * dim, kFillBytes));
    p.q_scales = reinterpret_cast<const float*>(random_array(bh * groups * 4, kFillFp32Scale));
    p.k = random_array(bkv * cap * dim, kFillBytes);
    p.k_scales = random_array(bkv * cap * groups * 2, kFillFp16Scale);
    p.v = random_array(bkv * cap * v_row, v == DecodeV::e4m3 ? kFillE4m3 : kFillBytes);
    p.v_scales = v == DecodeV::e4m3 ? random_array(bkv * dim * 4, kFillFp32Scale) : random_array(bkv * cap * (dim / vg) * 2, kFillFp16Scale);
    p.key_lo = mem.upload(std::vector<int>(batch, 0));
    p.key_hi = mem.upload(std::vector<int>(batch, tokens));
    const std::size_t slots = bh * split_k;
    float* part = mem.alloc<float>(slots * (dim + 2));
    p.part_m = part;
    p.part_l = part + slots;
    p.part_o = part + 2 * slots;
    p.out = mem.alloc<float>(bh * dim);

    for (int w = 0; w < 3; ++w) launch(l);
    check_launch("flash_decode (bench warm-up)");
    std::vector<double> ms;
    Timer timer;
    for (int r = 0; r < reps; ++r) {
      timer.start();
      launch(l);
      ms.push_back(timer.stop_ms());
    }
    check_launch("flash_decode (bench)");
    std::sort(ms.begin(), ms.end());
    res.ms = ms[ms.size() / 2];
    const double n = tokens;
    res.bytes = static_cast<double>(bkv) * n * dim                                        // K codes
                + static_cast<double>(bkv) * n * groups * 2                              // K scales (fp16)
                + static_cast<double>(bkv) * n * static_cast<double>(v_row)              // V codes
                + (v == DecodeV::e4m3 ? static_cast<double>(bkv) * dim * 4               // V scales: per channel fp32
                                      : static_cast<double>(bkv) * n * (dim / vg) * 2)    //           or fp16 per 32 channels
                + static_cast<double>(bh) * dim + static_cast<double>(bh) * groups * 4   // Q codes and scales
                + static_cast<double>(bh) * dim * 4;                                     // output (fp32)
    res.gbytes_per_s = res.bytes / res.ms / 1e6;
    res.blocks = split_k * kv_heads * batch;
    if (l.p.lay.total > 48 * 1024) allow_shared_bytes(l.kernel, l.p.lay.total);
    res.blocks_per_sm = max_active_blocks(l.kernel, l.threads, l.p.lay.total);
    res.fused_pv = fused;
  }
  {
    // Device copy bandwidth, timed the same way: 2 GiB read + 2 GiB written per copy.
    const std::size_t bytes = std::size_t{2} << 30;
    DeviceBuffers mem;
    std::uint8_t* src = mem.alloc<std::uint8_t>(bytes);
    std::uint8_t* dst = mem.alloc<std::uint8_t>(bytes);
    fill_bytes(src, 0x5A, bytes);
    for (int w = 0; w < 2; ++w) copy_on_device(dst, src, bytes);
    check_launch("device copy (warm-up)");
    std::vector<double> ms;
    Timer timer;
    for (int r = 0; r < std::max(5, std::min(reps, 20)); ++r) {
      timer.start();
      copy_on_device(dst, src, bytes);
      ms.push_back(timer.stop_ms());
    }
    std::sort(ms.begin(), ms.end());
    res.copy_gbytes_per_s = 2.0 * static_cast<double>(bytes) / ms[ms.size() / 2] / 1e6;
  }
  return res;
}

}  // namespace qattn::gpu
