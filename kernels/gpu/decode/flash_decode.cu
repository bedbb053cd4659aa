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
#include "kernels/gpu/decode/decode_shared.hpp"
#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/common/output_format.hpp"
#include "kernels/recipe/knobs.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

using namespace decode_detail;

namespace {

constexpr int kMaxThreads = 256;  // with 4 blocks per SM: at most 64 registers (no spills)

// ---- shared-memory layout of a split block (byte offsets, all 16-byte aligned) ----

struct Layout {
  int q = 0, q_scales = 0, s = 0, p = 0, o = 0, m = 0, l = 0, a = 0, v_channel = 0, v_group_scales = 0;  // fixed regions
  int buffers = 0;  // two tile buffers
  TileLayout tile;  // inside a buffer
  int total = 0;
};

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
  L.tile = tile_layout_of(d, groups, k_scale_bytes, bc, vf, v_row, v_group);
  L.buffers = take(2 * L.tile.bytes);
  L.total = off;
  return L;
}

struct Params : SplitParams {
  Layout lay;
};

// ---- kernel 1: one split of one (batch, kv head) ----

// H: query heads per PV work item (4, 2 or 1, dividing the group); kFused: P * v is exact in fp32,
// so fmaf rounds as the emulator's multiply-then-add (decode_pv_products_exact).
template <DecodeV VF, int H, bool kFused>
__global__ void __launch_bounds__(kMaxThreads, 4) decode_split_kernel(Params p) {
  extern __shared__ uint4 shared_vec[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(shared_vec);
  const int tid = threadIdx.x, nt = blockDim.x;
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

  const SplitTiles st = split_tiles(p, b, split);
  const int lo = st.lo, hi = st.hi, ta = st.ta, tb = st.tb;

  // The group's query rows and scales, V's channel scales, the running state.
  load_queries(p, bh0, G, qs, qsc, M, L, A);
  if (VF == DecodeV::e4m3) {
    for (int c = tid; c < d; c += nt) vch[c] = reinterpret_cast<const float*>(p.v_scales)[bkh * d + c];
  }
  for (int i = tid; i < G * d; i += nt) O[i] = 0.0f;
  if (ta < tb) issue_tile<VF>(p, buffers, bkh, ta * bc, min(hi, ta * bc + bc) - ta * bc);
  async_commit();

  const int items = d * (G / H), vgroups = d / p.v_group;
  for (int t = ta; t < tb; ++t) {
    const int j0 = t * bc;
    const int jlo = max(lo - j0, 0), jhi = min(hi - j0, bc);  // keys of the tile the query sees
    const unsigned char* cur = buffers + ((t - ta) & 1) * p.lay.tile.bytes;
    async_wait<0>();
    __syncthreads();  // tile t has landed; every thread is done with tile t - 1 and its buffer
    if (t + 1 < tb) issue_tile<VF>(p, buffers + ((t - ta + 1) & 1) * p.lay.tile.bytes, bkh, j0 + bc, min(hi, j0 + 2 * bc) - (j0 + bc));
    async_commit();

    // S = Q K^T for every (query head, key) of the tile; the tile's V scales (read after two barriers).
    score_tile<VF>(p, G, qs, qsc, cur, jlo, jhi, S, vgs);
    __syncthreads();

    // Online softmax, one wave per query head: P against the running max, quantized.
    softmax_tile(p, G, S, P, M, L, A);
    __syncthreads();

    // O = O * alpha, then O += P V key by key: item = (channel, H query heads); each V element is
    // dequantized once for the H heads.
    const unsigned char* vrows = cur + p.lay.tile.v;
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
        load_heads<H>(pr, pj);
#pragma unroll
        for (int h = 0; h < H; ++h) acc[h] = kFused ? fmaf(pj[h], v, acc[h]) : acc[h] + pj[h] * v;
      }
#pragma unroll
      for (int h = 0; h < H; ++h) O[(g0 + h) * d + c] = acc[h];
    }
  }
  __syncthreads();

  // The split's partial (m, l, o) per query head; an empty split leaves (-inf, 0, 0).
  write_state(p, bh0, G, split, M, L);
  for (int i = tid; i < G * d; i += nt) {
    const int g = i / d, c = i - g * d;
    p.part_o[((bh0 + g) * p.splits + split) * d + c] = O[i];
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

int heads_per_item(int group_heads) { return group_heads % 4 == 0 ? 4 : group_heads % 2 == 0 ? 2 : 1; }

bool is_fp16_value(float x) {
  const Format h = format_of(FormatId::fp16);
  return std::isfinite(x) && static_cast<double>(x) == decode(h, encode(h, x));
}

std::uint16_t fp16_bits(float x) { return static_cast<std::uint16_t>(encode(format_of(FormatId::fp16), x)); }

std::vector<std::uint32_t> pack_words(const std::int8_t* codes, std::size_t count) {
  std::vector<std::uint32_t> words(count / 4);
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint32_t x = 0;
    for (int k = 0; k < 4; ++k) x |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(codes[4 * w + k])) << (8 * k);
    words[w] = x;
  }
  return words;
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

using Launch = DecodeLaunch<Params>;

Launch plan(int batch, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
            float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k, bool fused,
            const DecodeTuning& tuning) {
  const int ws = wave_size();
  require(tuning.threads % ws == 0 && tuning.threads >= ws && tuning.threads <= kMaxThreads,
          "tuning.threads " + std::to_string(tuning.threads) + " must be a multiple of the wave size " + std::to_string(ws) + ", at most " +
              std::to_string(kMaxThreads));
  check_merge_threads(tuning.merge_threads, "flash_decode");
  Launch l;
  Params& p = l.p;
  set_split_params(p, q_heads, kv_heads, capacity, dim, group, k_scales_fp16, vf, v_group, score_factor, p_format, p_multiplier,
                   denominator_quantized, block_k, split_k);
  const int group_heads = q_heads / kv_heads, h = heads_per_item(group_heads);
  p.lay = layout_of(group_heads, dim, p.groups, p.k_scale_bytes, block_k, vf, p.v_row, p.v_group);
  l.kernel = split_kernel_for(vf, h, fused);
  l.grid = dim3(split_k, kv_heads, batch);
  l.threads = tuning.threads;
  l.merge_threads = tuning.merge_threads;
  l.merge_blocks = batch * q_heads;
  return l;
}


int significant_bits(float x) {
  const std::uint32_t m = (__builtin_bit_cast(std::uint32_t, x) & 0x7FFFFFu) | 0x800000u;
  return 24 - __builtin_ctz(m);
}

}  // namespace

// ---- what flash_decode_fast.cu shares (decode_shared.hpp) ----

namespace decode_detail {

void require(bool ok, const std::string& what, const char* who) {
  if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
}

int round_up(int x, int q) { return (x + q - 1) / q * q; }

PRound p_round_of(FormatId id) {
  const Format f = format_of(id);
  PRound r;
  r.integer = f.kind == Kind::integer;
  r.shift = 23 - f.man_bits;
  r.max = static_cast<float>(max_finite(f));
  r.min_normal = static_cast<float>(min_normal(f));
  r.quantum = static_cast<float>(min_subnormal(f));
  if (!r.integer && r.shift > 0) {
    r.half_less_one = (1u << (r.shift - 1)) - 1u;
    r.keep = ~((1u << r.shift) - 1u);
    const int q = std::ilogb(r.quantum);  // a power of two
    r.inv_quantum_a = std::ldexp(1.0f, -q / 2);
    r.inv_quantum_b = std::ldexp(1.0f, -q - (-q / 2));
    require(std::ldexp(1.0f, q) == r.quantum && q >= -252, "P format's smallest subnormal must be a power of two >= 2^-252", "decode (P rounding)");
  }
  return r;
}

TileLayout tile_layout_of(int d, int groups, int k_scale_bytes, int bc, DecodeV vf, int v_row, int v_group) {
  TileLayout t;
  t.k_stride = d + 16;
  t.k_scales = up16(bc * t.k_stride);
  t.v = t.k_scales + up16(bc * groups * k_scale_bytes);
  t.v_scales = t.v + up16(bc * v_row);
  t.bytes = t.v_scales + (vf == DecodeV::e4m3 ? 0 : up16(bc * (d / v_group) * 2));
  return t;
}

void set_split_params(SplitParams& p, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
                      float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k) {
  p.hq = q_heads;
  p.hkv = kv_heads;
  p.cap = capacity;
  p.d = dim;
  p.group = group;
  p.groups = dim / group;
  p.v_group = vf == DecodeV::e4m3 ? kNominalVGroup : v_group;
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
}

void check_merge_threads(int threads, const char* who) {
  const int ws = wave_size();
  require(threads % ws == 0 && threads >= ws && threads <= 1024,
          "tuning.merge_threads " + std::to_string(threads) + " must be a multiple of the wave size " + std::to_string(ws) + ", at most 1024", who);
}

void check_inputs(const DecodeInputs& in, const char* who) {
  const auto need = [who](bool ok, const std::string& what) { require(ok, what, who); };
  need(in.batch >= 1 && in.q_heads >= 1 && in.kv_heads >= 1 && in.tokens >= 1,
          "batch, heads and tokens must be positive (got batch " + std::to_string(in.batch) + ", heads " + std::to_string(in.q_heads) + "/" +
              std::to_string(in.kv_heads) + ", tokens " + std::to_string(in.tokens) + ")");
  need(in.q_heads % in.kv_heads == 0, "query heads " + std::to_string(in.q_heads) + " must be a multiple of kv heads " + std::to_string(in.kv_heads));
  need(in.dim % 32 == 0 && in.dim >= kMinDim && in.dim <= kMaxDim,
          "head dim " + std::to_string(in.dim) + " must be a multiple of 32 in [32, 256]");
  need(in.group > 0 && in.dim % in.group == 0 && in.group % 16 == 0,
          "Q/K scale group " + std::to_string(in.group) + " must be a multiple of 16 dividing the head dim " + std::to_string(in.dim));
  need(in.block_k % 16 == 0 && in.block_k >= 16 && in.block_k <= kMaxTile,
          "key tile " + std::to_string(in.block_k) + " must be a multiple of 16 in [16, 256]");
  need(in.split_k >= 1, "split_k must be >= 1");
  need(in.p_format != FormatId::e8m0, "P in e8m0 is not a P format");
  need(in.p_multiplier > 0 && std::isfinite(in.p_multiplier), "the P multiplier must be positive and finite");
  if (in.v_format != DecodeV::e4m3) {
    need(in.v_group >= 2 && in.v_group % 2 == 0 && in.dim % in.v_group == 0,
            "V scale group " + std::to_string(in.v_group) + " must be even and divide the head dim");
  }
  const std::size_t B = in.batch, hq = in.q_heads, hkv = in.kv_heads, n = in.tokens, d = in.dim, groups = in.dim / in.group;
  const auto size_is = [&need](std::size_t got, std::size_t want, const char* what) {
    need(got == want, std::string(what) + " has " + std::to_string(got) + " elements; expected " + std::to_string(want));
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
    need(in.key_lo[b] >= 0 && in.key_lo[b] < in.key_hi[b] && in.key_hi[b] <= in.tokens,
            "batch entry " + std::to_string(b) + ": keys [" + std::to_string(in.key_lo[b]) + ", " + std::to_string(in.key_hi[b]) +
                ") must be a non-empty range inside [0, " + std::to_string(in.tokens) + ")");
  }
}


template <typename T>
const std::uint8_t* upload_padded(DeviceBuffers& mem, const std::vector<T>& host) {
  const std::size_t bytes = sizeof(T) * host.size();
  std::uint8_t* dev = mem.alloc<std::uint8_t>(bytes + kArrayPad);
  fill_bytes(dev + bytes, 0, kArrayPad);
  copy_to_device(dev, host.data(), bytes);
  return dev;
}

DeviceCache upload_decode_cache(DeviceBuffers& mem, const DecodeInputs& in, const PackedDecodeCache& pk) {
  DeviceCache c;
  c.q = reinterpret_cast<const std::uint32_t*>(upload_padded(mem, pk.q));
  c.q_scales = reinterpret_cast<const float*>(upload_padded(mem, pk.q_scales));
  c.k = upload_padded(mem, pk.k);
  c.k_scales = upload_padded(mem, pk.k_scales);
  c.v = upload_padded(mem, pk.v);
  c.v_scales = upload_padded(mem, pk.v_scales);
  c.key_lo = mem.upload(in.key_lo);
  c.key_hi = mem.upload(in.key_hi);
  const std::size_t bh = static_cast<std::size_t>(in.batch) * in.q_heads, slots = bh * in.split_k, count = bh * in.dim;
  // NaN everywhere: a partial or an output element that no thread writes shows in the result.
  float* part = mem.alloc<float>(slots * (in.dim + 2));
  fill_bytes(part, 0xFF, sizeof(float) * slots * (in.dim + 2));
  float* out = mem.alloc<float>(count);
  fill_bytes(out, 0xFF, sizeof(float) * count);
  c.part_m = part;
  c.part_l = part + slots;
  c.part_o = part + 2 * slots;
  c.out = out;
  return c;
}

void check_bench_shape(int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps, const char* who) {
  require(batch >= 1 && q_heads >= 1 && kv_heads >= 1 && q_heads % kv_heads == 0 && tokens >= 1 && reps >= 1 && split_k >= 1,
          "bench: batch, heads (Hq a multiple of Hkv), tokens, split_k and reps must be positive", who);
  require(dim % 32 == 0 && dim >= kMinDim && dim <= kMaxDim, "bench: head dim must be a multiple of 32 in [32, 256]", who);
}

float bench_score_factor(int dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))) * kLog2e; }

DecodeBench run_decode_bench(DecodeV v, int batch, int q_heads, int kv_heads, int tokens, int dim, int split_k, int reps,
                             const std::function<void(const DeviceCache&)>& launch, const char* what) {
  const int groups = dim / kBenchGroup, cap = round_up(tokens, kDecodeCapacityQuantum), vg = kBenchVGroup;
  const std::size_t bkv = static_cast<std::size_t>(batch) * kv_heads, bh = static_cast<std::size_t>(batch) * q_heads;
  const std::size_t v_row = v == DecodeV::q4_0 ? dim / 2 : dim;
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
    DeviceCache c;
    c.q = reinterpret_cast<const std::uint32_t*>(random_array(bh * dim, kFillBytes));
    c.q_scales = reinterpret_cast<const float*>(random_array(bh * groups * 4, kFillFp32Scale));
    c.k = random_array(bkv * cap * dim, kFillBytes);
    c.k_scales = random_array(bkv * cap * groups * 2, kFillFp16Scale);
    c.v = random_array(bkv * cap * v_row, v == DecodeV::e4m3 ? kFillE4m3 : kFillBytes);
    c.v_scales = v == DecodeV::e4m3 ? random_array(bkv * dim * 4, kFillFp32Scale) : random_array(bkv * cap * (dim / vg) * 2, kFillFp16Scale);
    c.key_lo = mem.upload(std::vector<int>(batch, 0));
    c.key_hi = mem.upload(std::vector<int>(batch, tokens));
    const std::size_t slots = bh * split_k;
    float* part = mem.alloc<float>(slots * (dim + 2));
    c.part_m = part;
    c.part_l = part + slots;
    c.part_o = part + 2 * slots;
    c.out = mem.alloc<float>(bh * dim);

    res.ms = median_launch_ms(reps, [&] { launch(c); }, [what] { check_launch(what); }, what);
    const double n = tokens;
    res.bytes = static_cast<double>(bkv) * n * dim                                        // K codes
                + static_cast<double>(bkv) * n * groups * 2                              // K scales (fp16)
                + static_cast<double>(bkv) * n * static_cast<double>(v_row)              // V codes
                + (v == DecodeV::e4m3 ? static_cast<double>(bkv) * dim * 4               // V scales: per channel fp32
                                      : static_cast<double>(bkv) * n * (dim / vg) * 2)    //           or fp16 per 32 channels
                + static_cast<double>(bh) * dim + static_cast<double>(bh) * groups * 4   // Q codes and scales
                + static_cast<double>(bh) * dim * 4;                                     // output (fp32)
    res.gbytes_per_s = res.bytes / res.ms / 1e6;
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

}  // namespace decode_detail

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
  const DeviceCache cache = upload_decode_cache(mem, in, pk);
  bind(l.p, cache);
  launch_decode(l);
  check_launch("flash_decode (split + merge kernels)");
  round_output(cache.out, static_cast<std::size_t>(in.batch) * in.q_heads * in.dim, in.out);
  return download(cache.out, static_cast<std::size_t>(in.batch) * in.q_heads * in.dim);
}

const char* run_decode(const Problem& p, const Recipe& r, std::vector<float>& out) {
  out = flash_decode(make_decode_inputs(p, r));  // one row per head: [Hq][1][d]
  return kDecodeKernelName;
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
  std::string why = undeclared_knob(r, GpuFamily::decode);  // the knob table's refusals first, as dispatch asks
  if (why.empty()) why = decode_not_covered(p, r);
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
  in.out = r.out;
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
  check_bench_shape(batch, q_heads, kv_heads, tokens, dim, split_k, reps, "flash_decode");
  // The V scales the bench draws: e4m3 per channel in fp32 (24 significant bits: no fused path),
  // q8_0 / q4_0 in fp16 over [2^-9, 2^-6).
  const std::vector<float> v_scale_sample = v == DecodeV::e4m3 ? std::vector<float>{0x1.fffffep-9f, 0x1p-9f} : std::vector<float>{0x1.ffcp-7f, 0x1p-9f};
  const bool fused = decode_pv_products_exact(FormatId::e4m3, v, v_scale_sample);
  Launch l = plan(batch, q_heads, kv_heads, round_up(tokens, kDecodeCapacityQuantum), dim, kBenchGroup, true, v, kBenchVGroup, bench_score_factor(dim),
                  FormatId::e4m3, kBenchPMultiplier, true, kBenchBlockK, split_k, fused, tuning);
  DecodeBench res = bench_decode_launch(l, v, batch, q_heads, kv_heads, tokens, dim, split_k, reps, "flash_decode (bench)");
  res.fused_pv = fused;
  return res;
}

}  // namespace qattn::gpu
