// The fast decode path (flash_decode_fast.hpp): split-K decode over the packed int8 K cache and an
// e4m3 / q8_0 / q4_0 V cache, organized for bandwidth rather than for the emulator's summation order.
//
// Kernel 1, one block per (split, kv head x head chunk, batch), serving H query heads of the GQA
// group (H = 8, 4, 2 or 1, the largest dividing the group: one chunk for groups of 1, 2, 4, 8, 16 ...;
// each further chunk reads the K/V tiles again). Tiles stream through a 2- or 3-buffer pipeline of
// 16-byte async copies. Per tile of Bc keys the scores, the running max, P's quantization and l are
// the reference's steps (decode_shared.hpp), so the emulator's values:
//   S = (sum over scale blocks of fp32(int dot) * (sq * sk)) * c
//   m_new = max(m, max S); alpha = exp2(m - m_new); P = round(exp2(S - m_new) * multiplier)
//   l = alpha * l + sum P
// P V is where it differs: thread (slice s, channel run e) owns C = 32 / H channels of all H heads
// (32 fp32 accumulators) and the keys s, s + slices, ... of every tile of its split (slices: up to
// 16, as many as 256 threads hold), acc = acc * alpha + sum P_j v_j with fmaf; at the split's end
// the slices' partial sums of each (head, channel) are added in slice order through shared memory.
// V is decoded without integer-to-float converts: e4m3 through fp16's bit layout, q8_0 / q4_0
// through the 2^23 magic number (both exact). Kernel 2 merges the splits as the reference does.
//
// Tuning (stages, merge threads) never changes a result: the thread count and the key-to-slice map
// depend on d and H only.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/gpu/decode_shared.hpp"
#include "kernels/gpu/flash_decode_fast.hpp"
#include "kernels/gpu/platform.hpp"

namespace qattn::gpu {

using namespace decode_detail;

namespace {

constexpr const char* kWho = "flash_decode_fast";
constexpr int kAccPerThread = 32;  // fp32 P V accumulators per thread (C channels x H heads): registers stay moderate
constexpr int kMaxThreads = 256;   // per split block; with kMinBlocksPerSm, at most 80 registers a thread
constexpr int kMinBlocksPerSm = 3;
constexpr int kMaxSlices = 16;     // key slices of P V (partial sums per head and channel)
constexpr int kMaxStages = 3;
constexpr int kMinStages = 2;

// e4m3's 7 magnitude bits placed at fp16's exponent/mantissa boundary read as 2^-8 times the value
// (exponent biases 7 and 15; subnormals land on fp16 subnormals), so the channel scale carries 2^8.
constexpr float kE4m3ViaFp16 = 256.0f;
constexpr float kE4m3ScaleLimit = 0x1p120f;  // |scale| below it: scale * 2^8 stays finite

// q8_0 / q4_0: a code with its sign bit flipped is code + 128 (code + 8) as an unsigned field; placed
// in the mantissa of 2^23 it reads 2^23 + code + bias, and subtracting that constant is exact.
constexpr std::uint32_t kMagicBits = 0x4B000000u;  // 2^23
constexpr std::uint32_t kQ8SignFlip = 0x80808080u, kQ4SignFlip = 0x88888888u;
constexpr float kQ8Magic = 8388608.0f + 128.0f, kQ4Magic = 8388608.0f + 8.0f;
constexpr std::uint32_t kPermMagicLow = 0x7440u;  // __byte_perm(u, 2^23 bits, this | k): byte k of u under 2^23's exponent

// Heads a block serves and, from them, the P V shape.
QATTN_HD constexpr int heads_per_block(int group_heads) {
  return group_heads % 8 == 0 ? 8 : group_heads % 4 == 0 ? 4 : group_heads % 2 == 0 ? 2 : 1;
}
QATTN_HD constexpr int channels_per_thread(int h) { return kAccPerThread / h; }
// Key slices: as many as kMaxThreads threads hold (d / C threads a slice), at most kMaxSlices. Part
// of the numerics (the P V summation order), so a function of d and H only, never of tuning.
int key_slices(int h, int d) { return std::clamp(kMaxThreads / (d / channels_per_thread(h)), 1, kMaxSlices); }

// ---- shared-memory layout of a split block (byte offsets, all 16-byte aligned) ----

struct FastLayout {
  int q = 0, q_scales = 0, s = 0, p = 0, m = 0, l = 0, a = 0, v_group_scales = 0;  // fixed regions
  int buffers = 0;  // `stages` tile buffers; after the split's last tile, the slices' P V sums
  TileLayout tile;  // inside one tile buffer
  int stages = 0, total = 0;
};

struct FastParams : SplitParams {
  int chunks = 1;  // blocks per (batch, kv head, split): the GQA group / H
  int slices = 1;  // key slices of P V (key_slices)
  FastLayout lay;
};

// ---- V decoding: a thread's C channels of one key ----

template <int Bytes>
struct CodeWords {
  static constexpr int kCount = Bytes < 4 ? 1 : Bytes / 4;
};

template <int Bytes>
__device__ inline void load_codes(const unsigned char* src, std::uint32_t (&w)[CodeWords<Bytes>::kCount]) {
  if constexpr (Bytes == 2) {
    w[0] = *reinterpret_cast<const std::uint16_t*>(src);
  } else if constexpr (Bytes == 4) {
    w[0] = *reinterpret_cast<const std::uint32_t*>(src);
  } else if constexpr (Bytes == 8) {
    const uint2 x = *reinterpret_cast<const uint2*>(src);
    w[0] = x.x;
    w[1] = x.y;
  } else {
#pragma unroll
    for (int k = 0; k < Bytes / 16; ++k) {
      const uint4 x = reinterpret_cast<const uint4*>(src)[k];
      w[4 * k] = x.x;
      w[4 * k + 1] = x.y;
      w[4 * k + 2] = x.z;
      w[4 * k + 3] = x.w;
    }
  }
}

// v[i] = decode(code i) * scale, each one fp32 rounding as the reference's decode-then-multiply
// (the decoded code is exact, the 2^8 moved into `scale` is exact).
template <DecodeV VF, int C>
__device__ inline void decode_v(const std::uint32_t* w, const float* channel_scale, float group_scale, float (&v)[C]) {
  if constexpr (VF == DecodeV::e4m3) {
#pragma unroll
    for (int k = 0; k < C / 4; ++k) {
      const std::uint32_t x = w[k];
      // Codes 0 and 2 (bytes 0, 2) and codes 1 and 3 as fp16 pairs: sign to bit 15, magnitude to bits 13..7.
      const float2 even = unpack_f16x2(((x << 8) & 0x80008000u) | ((x << 7) & 0x3F803F80u));
      const float2 odd = unpack_f16x2((x & 0x80008000u) | ((x >> 1) & 0x3F803F80u));
      v[4 * k] = even.x * channel_scale[4 * k];
      v[4 * k + 1] = odd.x * channel_scale[4 * k + 1];
      v[4 * k + 2] = even.y * channel_scale[4 * k + 2];
      v[4 * k + 3] = odd.y * channel_scale[4 * k + 3];
    }
  } else if constexpr (VF == DecodeV::q8_0) {
#pragma unroll
    for (int k = 0; k < C / 4; ++k) {
      const std::uint32_t u = w[k] ^ kQ8SignFlip;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float f = __builtin_bit_cast(float, __byte_perm(u, kMagicBits, kPermMagicLow | static_cast<std::uint32_t>(b)));
        v[4 * k + b] = (f - kQ8Magic) * group_scale;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < C; ++i) {  // channel i: nibble i % 8 of word i / 8 (low nibble first)
      const std::uint32_t u = w[i / 8] ^ kQ4SignFlip;
      const float f = __builtin_bit_cast(float, ((u >> (4 * (i % 8))) & 0xFu) | kMagicBits);
      v[i] = (f - kQ4Magic) * group_scale;
    }
  }
}

// ---- kernel 1: one split of one (batch, kv head, head chunk) ----

template <DecodeV VF, int H>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocksPerSm) decode_fast_split_kernel(FastParams p) {
  constexpr int C = channels_per_thread(H);
  constexpr int kVBytes = VF == DecodeV::q4_0 ? C / 2 : C;  // a thread's V bytes of one key
  extern __shared__ uint4 shared_vec[];
  unsigned char* sm = reinterpret_cast<unsigned char*>(shared_vec);
  const int tid = threadIdx.x, nt = blockDim.x;
  const int split = blockIdx.x, kh = blockIdx.y / p.chunks, chunk = blockIdx.y - kh * p.chunks, b = blockIdx.z;
  const int G = p.hq / p.hkv, d = p.d, bc = p.bc;
  const long bkh = static_cast<long>(b) * p.hkv + kh;                                // (batch, kv head)
  const long bh0 = static_cast<long>(b) * p.hq + static_cast<long>(kh) * G + chunk * H;  // the block's first query head

  std::int8_t* qs = reinterpret_cast<std::int8_t*>(sm + p.lay.q);  // [H][d]
  float* qsc = reinterpret_cast<float*>(sm + p.lay.q_scales);        // [H][groups]
  float* S = reinterpret_cast<float*>(sm + p.lay.s);                 // [H][bc]
  float* P = reinterpret_cast<float*>(sm + p.lay.p);                 // [bc][H]
  float* M = reinterpret_cast<float*>(sm + p.lay.m);
  float* L = reinterpret_cast<float*>(sm + p.lay.l);
  float* A = reinterpret_cast<float*>(sm + p.lay.a);
  float* vgs = reinterpret_cast<float*>(sm + p.lay.v_group_scales);  // q8_0 / q4_0: the tile's V scales [bc][d / v_group]
  unsigned char* const buffers = sm + p.lay.buffers;                 // tile i of the split in buffer i % stages
  const int stages = p.lay.stages;

  const SplitTiles st = split_tiles(p, b, split);
  const int lo = st.lo, hi = st.hi, ta = st.ta, tb = st.tb;
  const auto issue = [&](int t) {  // tile t into its buffer (nothing past the split), one commit group either way
    if (t < tb) issue_tile<VF>(p, buffers + ((t - ta) % stages) * p.lay.tile.bytes, bkh, t * bc, min(hi, t * bc + bc) - t * bc);
    async_commit();
  };
  for (int t = ta; t < ta + stages - 1; ++t) issue(t);

  load_queries(p, bh0, H, qs, qsc, M, L, A);

  // This thread's P V work: channels [c0, c0 + C) of keys slice, slice + slices, ...
  const int runs = d / C, slices = p.slices, slice = tid / runs, c0 = (tid - slice * runs) * C;
  const bool pv_thread = slice < slices;  // the block may hold more threads than slices x runs (a whole wave)
  const int vgroups = d / p.v_group, v_group_index = c0 / p.v_group, v_byte0 = VF == DecodeV::q4_0 ? c0 / 2 : c0;
  float channel_scale[VF == DecodeV::e4m3 ? C : 1];
  if constexpr (VF == DecodeV::e4m3) {
    const float* vs = reinterpret_cast<const float*>(p.v_scales) + bkh * d;
#pragma unroll
    for (int i = 0; i < C; ++i) channel_scale[i] = pv_thread ? vs[c0 + i] * kE4m3ViaFp16 : 0.0f;
  } else {
    channel_scale[0] = 0.0f;
  }
  float acc[H][C];
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int i = 0; i < C; ++i) acc[h][i] = 0.0f;

  for (int t = ta; t < tb; ++t) {
    const int j0 = t * bc;
    const int jlo = max(lo - j0, 0), jhi = min(hi - j0, bc);  // keys of the tile the query sees
    const unsigned char* cur = buffers + ((t - ta) % stages) * p.lay.tile.bytes;
    if (stages == kMaxStages) {
      async_wait<kMaxStages - 2>();
    } else {
      async_wait<kMinStages - 2>();
    }
    __syncthreads();  // tile t has landed; every thread is done with tile t - 1 and its buffer
    issue(t + stages - 1);

    score_tile<VF>(p, H, qs, qsc, cur, jlo, jhi, S, vgs);
    __syncthreads();
    softmax_tile(p, H, S, P, M, L, A);
    __syncthreads();

    // acc = acc * alpha + P V over this thread's keys of the tile.
    if (pv_thread) {
      float alpha[H];
#pragma unroll
      for (int h = 0; h < H; ++h) alpha[h] = A[h];
#pragma unroll
      for (int h = 0; h < H; ++h)
#pragma unroll
        for (int i = 0; i < C; ++i) acc[h][i] *= alpha[h];
      const unsigned char* vrows = cur + p.lay.tile.v + v_byte0;
#pragma unroll 1
      for (int jj = jlo + slice; jj < jhi; jj += slices) {
        std::uint32_t w[CodeWords<kVBytes>::kCount];
        load_codes<kVBytes>(vrows + jj * p.v_row, w);
        const float group_scale = VF == DecodeV::e4m3 ? 1.0f : vgs[jj * vgroups + v_group_index];
        float v[C];
        decode_v<VF, C>(w, channel_scale, group_scale, v);
        float pj[H];
        load_p<H>(P + jj * H, pj);
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
          for (int i = 0; i < C; ++i) acc[h][i] = fmaf(pj[h], v[i], acc[h][i]);
      }
    }
  }

  // The slices' sums through shared memory (the tile buffers, idle now), added in slice order.
  async_wait<0>();
  __syncthreads();
  float* red = reinterpret_cast<float*>(buffers);  // [slices][H][d]
  if (pv_thread) {
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int i = 0; i < C; i += 4)
        *reinterpret_cast<float4*>(red + (slice * H + h) * d + c0 + i) = make_float4(acc[h][i], acc[h][i + 1], acc[h][i + 2], acc[h][i + 3]);
  }
  __syncthreads();
  // The split's partial (m, l, o) per query head; an empty split leaves (-inf, 0, 0).
  for (int i = tid; i < H * d; i += nt) {
    const int g = i / d, c = i - g * d;
    float o = 0.0f;
    for (int s = 0; s < slices; ++s) o += red[(s * H + g) * d + c];
    p.part_o[((bh0 + g) * p.splits + split) * d + c] = o;
  }
  write_state(p, bh0, H, split, M, L);
}

// ---- host side ----

using FastKernel = void (*)(FastParams);

template <DecodeV VF>
FastKernel fast_kernel_for(int h) {
  switch (h) {
    case 8: return decode_fast_split_kernel<VF, 8>;
    case 4: return decode_fast_split_kernel<VF, 4>;
    case 2: return decode_fast_split_kernel<VF, 2>;
    default: return decode_fast_split_kernel<VF, 1>;
  }
}

FastKernel fast_kernel_for(DecodeV vf, int h) {
  switch (vf) {
    case DecodeV::e4m3: return fast_kernel_for<DecodeV::e4m3>(h);
    case DecodeV::q8_0: return fast_kernel_for<DecodeV::q8_0>(h);
    case DecodeV::q4_0: return fast_kernel_for<DecodeV::q4_0>(h);
  }
  return nullptr;
}

using FastLaunch = DecodeLaunch<FastParams>;

// Shared bytes of a block with `stages` tile buffers.
FastLayout fast_layout_of(int h, int d, int groups, int k_scale_bytes, int bc, DecodeV vf, int v_row, int v_group, int stages) {
  FastLayout L;
  int off = 0;
  const auto take = [&](int bytes) {
    const int at = off;
    off += up16(bytes);
    return at;
  };
  L.q = take(h * d);
  L.q_scales = take(4 * h * groups);
  L.s = take(4 * h * bc);
  L.p = take(4 * bc * h);
  L.m = take(4 * h);
  L.l = take(4 * h);
  L.a = take(4 * h);
  L.v_group_scales = take(vf == DecodeV::e4m3 ? 0 : 4 * bc * (d / v_group));
  L.tile = tile_layout_of(d, groups, k_scale_bytes, bc, vf, v_row, v_group);
  L.stages = stages;
  const int sums = 4 * key_slices(h, d) * h * d;  // the slices' P V sums, after the last tile
  L.buffers = take(std::max(stages * L.tile.bytes, sums));
  L.total = off;
  return L;
}

FastLaunch plan_fast(int batch, int q_heads, int kv_heads, int capacity, int dim, int group, bool k_scales_fp16, DecodeV vf, int v_group,
                     float score_factor, FormatId p_format, float p_multiplier, bool denominator_quantized, int block_k, int split_k,
                     const DecodeFastTuning& tuning) {
  require(tuning.stages >= kMinStages && tuning.stages <= kMaxStages,
          "tuning.stages " + std::to_string(tuning.stages) + " must be " + std::to_string(kMinStages) + " or " + std::to_string(kMaxStages), kWho);
  check_merge_threads(tuning.merge_threads, kWho);
  const int group_heads = q_heads / kv_heads, h = heads_per_block(group_heads), c = channels_per_thread(h);
  if (vf != DecodeV::e4m3) {
    require(v_group % c == 0, std::string("V scale group (v_group) ") + std::to_string(v_group) + " must be a multiple of " + std::to_string(c) +
                                  ", the channels one thread reads with " + std::to_string(h) + " query heads per block (GQA group " +
                                  std::to_string(group_heads) + ")",
            kWho);
  }
  FastLaunch l;
  FastParams& p = l.p;
  set_split_params(p, q_heads, kv_heads, capacity, dim, group, k_scales_fp16, vf, v_group, score_factor, p_format, p_multiplier,
                   denominator_quantized, block_k, split_k);
  p.chunks = group_heads / h;
  const int ws = wave_size();
  p.slices = key_slices(h, dim);
  l.threads = round_up(std::max(p.slices * dim / c, ws), ws);
  const int limit = max_shared_bytes_per_block();
  for (int stages = tuning.stages; stages >= kMinStages; --stages) {
    p.lay = fast_layout_of(h, dim, p.groups, p.k_scale_bytes, block_k, vf, p.v_row, p.v_group, stages);
    if (p.lay.total <= limit) break;
  }
  require(p.lay.total <= limit,
          "key tile (block_k) " + std::to_string(block_k) + " at head dim " + std::to_string(dim) + " needs " + std::to_string(p.lay.total) +
              " bytes of shared memory with two tile buffers; the device allows " + std::to_string(limit) + " (use a smaller block_k)",
          kWho);
  l.kernel = fast_kernel_for(vf, h);
  l.grid = dim3(split_k, kv_heads * p.chunks, batch);
  l.merge_threads = tuning.merge_threads;
  l.merge_blocks = batch * q_heads;
  return l;
}


}  // namespace

std::vector<float> flash_decode_fast(const DecodeInputs& in, const DecodeFastTuning& tuning) {
  check_inputs(in, kWho);
  if (in.v_format == DecodeV::e4m3) {
    for (std::size_t i = 0; i < in.v_scales.size(); ++i) {
      require(std::fabs(in.v_scales[i]) < kE4m3ScaleLimit,
              "e4m3 V scale (v_scales[" + std::to_string(i) + "]) " + std::to_string(in.v_scales[i]) + " must be below 2^120 in magnitude", kWho);
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
