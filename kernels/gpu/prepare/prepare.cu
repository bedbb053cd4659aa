// Preparation kernels: Hadamard rotation, K channel means, int8 Q/K and e4m3 V quantization into the
// flash kernels' layouts (prepare.hpp). Every value is the CPU path's, computed by the same sequence
// of IEEE operations: float64 butterflies and sums, the shared scalar codec (codec.hpp) for scales
// and codes. No operation here may be contracted (--fmad=false / -ffp-contract=off for this library).
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/formats/numeric_failure.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/common/matrix_inputs.hpp"  // kMmaKeyTile
#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/prepare/prepare.hpp"
#include "kernels/recipe/knobs.hpp"  // validate

namespace qattn::gpu {

namespace {

constexpr int kThreads = 256;         // flat elementwise kernels
constexpr int kReduceThreads = 256;   // block reductions (a power of two)
constexpr int kHadamardThreads = 128;

constexpr double kMaxDouble = 1.7976931348623157e308;

int blocks_for(long total) { return static_cast<int>((total + kThreads - 1) / kThreads); }

long check_total(int heads, int tokens, int dim, const char* what) {
  if (heads <= 0 || tokens <= 0 || dim <= 0) {
    throw std::invalid_argument(std::string(what) + ": shape [" + std::to_string(heads) + ", " + std::to_string(tokens) + ", " +
                                std::to_string(dim) + "] has an empty dimension");
  }
  return static_cast<long>(heads) * tokens * dim;
}

// ---- rotation ----

// One block per row: the row in shared memory as float64, one stage of butterflies (pairs j, j + len
// for increasing len, as the CPU loops) per barrier, then fp32(x * norm).
__global__ void hadamard_kernel(float* x, int d, double norm) {
  extern __shared__ double prepare_row[];
  float* row = x + static_cast<long>(blockIdx.x) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) prepare_row[c] = static_cast<double>(row[c]);
  __syncthreads();
  for (int len = 1; len < d; len <<= 1) {
    for (int pr = threadIdx.x; pr < d / 2; pr += blockDim.x) {
      const int i = (pr / len) * (2 * len) + pr % len;
      const double a = prepare_row[i], b = prepare_row[i + len];
      prepare_row[i] = a + b;
      prepare_row[i + len] = a - b;
    }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < d; c += blockDim.x) row[c] = static_cast<float>(prepare_row[c] * norm);
}

// ---- K smoothing: one thread per (head, block, channel), keys in order ----

__global__ void k_mean_kernel(float* k, int heads, int n, int d, int block, int blocks, float* means) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(heads) * blocks * d) return;
  const int c = static_cast<int>(t % d);
  const int b = static_cast<int>((t / d) % blocks);
  const int h = static_cast<int>(t / (static_cast<long>(d) * blocks));
  const int j0 = b * block, j1 = j0 + block < n ? j0 + block : n;
  float* base = k + static_cast<long>(h) * n * d + c;
  double acc = 0.0;
  for (int j = j0; j < j1; ++j) acc += static_cast<double>(base[static_cast<long>(j) * d]);
  const float mu = static_cast<float>(acc / static_cast<double>(j1 - j0));
  if (means != nullptr) means[t] = mu;  // t = (h * blocks + b) * d + c
  for (int j = j0; j < j1; ++j) base[static_cast<long>(j) * d] -= mu;
}

__global__ void k_running_mean_kernel(float* k, int heads, int n, int d) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(heads) * d) return;
  const int c = static_cast<int>(t % d), h = static_cast<int>(t / d);
  float* base = k + static_cast<long>(h) * n * d + c;
  double acc = 0.0;
  for (int j = 0; j < n; ++j) {
    const double raw = static_cast<double>(base[static_cast<long>(j) * d]);
    if (j > 0) base[static_cast<long>(j) * d] = static_cast<float>(raw - static_cast<double>(static_cast<float>(acc / static_cast<double>(j))));
    acc += raw;
  }
}

// ---- absmax reductions (max is exact: any order gives the CPU's value) ----

// Group g = (outer o, part i) covers x[o * stride + i * len, o * stride + min(extent, (i + 1) * len)).
__global__ void range_absmax_kernel(const float* x, long stride, long extent, long len, int parts, float* out) {
  __shared__ float partial[kReduceThreads];
  const int o = blockIdx.x / parts, i = blockIdx.x % parts;
  const long begin = o * stride + i * len;
  const long end = o * stride + ((i + 1) * len < extent ? (i + 1) * len : extent);
  float m = 0.0f;
  for (long e = begin + threadIdx.x; e < end; e += blockDim.x) m = fmaxf(m, fabsf(x[e]));
  partial[threadIdx.x] = m;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// One thread per (head, channel) over all tokens.
__global__ void channel_absmax_kernel(const float* x, int heads, int n, int d, float* out) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(heads) * d) return;
  const int c = static_cast<int>(t % d), h = static_cast<int>(t / d);
  const float* base = x + static_cast<long>(h) * n * d + c;
  float m = 0.0f;
  for (int j = 0; j < n; ++j) m = fmaxf(m, fabsf(base[static_cast<long>(j) * d]));
  out[t] = m;
}

// ---- scales: quantize()'s rule per group ----

struct ScaleRuleParams {
  bool is_static = false;
  double static_scale = 0;  // 1 / multiplier, formed on the host in float64 as quantize() does
  double max_code = 0;      // max_finite(element format)
  Format scale_format{};
};

__global__ void scales_kernel(ScaleRuleParams rp, const float* absmax, int groups, float* scale, float* inv, int* error) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  double s = rp.is_static ? rp.static_scale : static_cast<double>(absmax[g]) / rp.max_code;
  if (s == 0) s = 1;
  double stored = round_to(rp.scale_format, static_cast<double>(static_cast<float>(s)));
  if (!(stored > 0) || !(stored <= kMaxDouble)) {
    *error = 1;
    stored = 1;
  }
  const float sc = static_cast<float>(stored);
  scale[g] = sc;
  // quantize() forms 1.0f / scale in fp32; float64 then fp32 is the same value (double rounding of a
  // quotient of floats through float64 is innocuous), whatever the compiler's fp32 division is.
  inv[g] = static_cast<float>(1.0 / static_cast<double>(sc));
}

// ---- codes ----

enum class RowGroup : int { tensor, head, token, block };

struct RowQuantParams {
  const float* x;
  const float* scale;  // per group
  const float* inv;
  std::int8_t* codes;
  float* scales_out;
  int heads, n, d, rows_out, block, blocks;
  RowGroup group;
  Format f;
};

__global__ void quantize_rows_kernel(RowQuantParams p) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(p.heads) * p.n * p.d) return;
  const int c = static_cast<int>(t % p.d);
  const long row = t / p.d;  // h * n + token
  const int h = static_cast<int>(row / p.n), tok = static_cast<int>(row % p.n);
  int g = 0;
  switch (p.group) {
    case RowGroup::tensor: g = 0; break;
    case RowGroup::head: g = h; break;
    case RowGroup::token: g = static_cast<int>(row); break;
    case RowGroup::block: g = h * p.blocks + tok / p.block; break;
  }
  const std::uint32_t code = qattn::quantize(p.f, p.x[t], p.inv[g]);
  const long out_row = static_cast<long>(h) * p.rows_out + tok;
  p.codes[out_row * p.d + c] = static_cast<std::int8_t>(static_cast<std::uint8_t>(code & 0xFFu));
  if (c == 0) p.scales_out[out_row] = p.scale[g];
}

enum class ChannelGroup : int { tensor, head, channel };

struct VQuantParams {
  const float* v;
  const float* scale;  // per group (null for a unit scale)
  const float* inv;
  std::uint16_t* vt;
  float* v_scales;
  int heads, n, np, d;
  bool unit;
  ChannelGroup group;
  Format f;
};

// One thread per element of V [h][j][c]: its value widened to fp16 lands at Vt[h][c][j].
// x rounded to a float format, element by element, as the emulator's unit-scale operands.
__global__ void round_kernel(const float* x, long total, Format f, float* y) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < total) y[t] = static_cast<float>(round_to(f, static_cast<double>(x[t])));
}

__global__ void quantize_v_kernel(VQuantParams p) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<long>(p.heads) * p.n * p.d) return;
  const int c = static_cast<int>(t % p.d);
  const long row = t / p.d;
  const int h = static_cast<int>(row / p.n), j = static_cast<int>(row % p.n);
  int g = 0;
  switch (p.group) {
    case ChannelGroup::tensor: g = 0; break;
    case ChannelGroup::head: g = h; break;
    case ChannelGroup::channel: g = h * p.d + c; break;
  }
  const float x = p.v[t];
  const std::uint32_t code = p.unit ? encode(p.f, static_cast<double>(x)) : qattn::quantize(p.f, x, p.inv[g]);
  p.vt[(static_cast<long>(h) * p.d + c) * p.np + j] = static_cast<std::uint16_t>(encode(format_of(FormatId::fp16), decode(p.f, code)));
  if (j == 0) p.v_scales[static_cast<long>(h) * p.d + c] = p.unit ? 1.0f : p.scale[g];
}

// ---- host helpers ----

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Absmax of each group of contiguous parts: [outer][parts] groups, each over [i * len, min(extent, ..)).
float* range_absmax(const float* x, long outer, long stride, long extent, long len, DeviceBuffers& mem) {
  const long parts = (extent + len - 1) / len;
  float* out = mem.alloc<float>(static_cast<std::size_t>(outer * parts));
  range_absmax_kernel<<<static_cast<int>(outer * parts), kReduceThreads>>>(x, stride, extent, len, static_cast<int>(parts), out);
  check_launch("range_absmax_kernel");
  return out;
}

// Scales (and reciprocals) of `groups` groups from their absmax (null for a static rule).
void group_scales(const QuantSpec& spec, const float* absmax, int groups, float* scale, float* inv, DeviceBuffers& mem) {
  ScaleRuleParams rp;
  rp.is_static = spec.rule == ScaleRule::static_multiplier;
  rp.static_scale = rp.is_static ? 1.0 / spec.multiplier : 0.0;
  rp.max_code = max_finite(format_of(spec.format));
  rp.scale_format = format_of(spec.scale_format);
  int* error = mem.alloc<int>(1);
  fill_bytes(error, 0, sizeof(int));
  scales_kernel<<<(groups + kThreads - 1) / kThreads, kThreads>>>(rp, absmax, groups, scale, inv, error);
  check_launch("scales_kernel");
  if (download(error, 1)[0] != 0) {
    throw NumericFailure(std::string("quantize (gpu): a scale is not representable in scale format '") + name_of(spec.scale_format) +
                            "'");
  }
}

}  // namespace

int padded_tokens(int tokens) { return (tokens + kMmaKeyTile - 1) / kMmaKeyTile * kMmaKeyTile; }

void hadamard_rows(float* x, int heads, int tokens, int dim) {
  check_total(heads, tokens, dim, "hadamard_rows");
  if (!is_power_of_two(dim) || dim > kMaxHadamardDim) {
    throw std::invalid_argument("hadamard_rows: head dim " + std::to_string(dim) + " must be a power of two, at most " +
                                std::to_string(kMaxHadamardDim));
  }
  const double norm = 1.0 / std::sqrt(static_cast<double>(dim));  // as the CPU forms it
  const long rows = static_cast<long>(heads) * tokens;
  const int threads = dim / 2 < kHadamardThreads ? (dim / 2 > 0 ? dim / 2 : 1) : kHadamardThreads;
  hadamard_kernel<<<static_cast<int>(rows), threads, static_cast<int>(sizeof(double)) * dim>>>(x, dim, norm);
  check_launch("hadamard_kernel");
}

void k_global_mean(float* k, int heads, int tokens, int dim) {
  const long total = static_cast<long>(heads) * dim;
  check_total(heads, tokens, dim, "k_global_mean");
  k_mean_kernel<<<blocks_for(total), kThreads>>>(k, heads, tokens, dim, tokens, 1, nullptr);
  check_launch("k_mean_kernel (global)");
}

void k_block_mean(float* k, int heads, int tokens, int dim, int block, float* means) {
  check_total(heads, tokens, dim, "k_block_mean");
  if (block <= 0) throw std::invalid_argument("k_block_mean: block " + std::to_string(block) + " must be positive");
  const int blocks = (tokens + block - 1) / block;
  const long total = static_cast<long>(heads) * blocks * dim;
  k_mean_kernel<<<blocks_for(total), kThreads>>>(k, heads, tokens, dim, block, blocks, means);
  check_launch("k_mean_kernel (block)");
}

void k_running_mean(float* k, int heads, int tokens, int dim) {
  check_total(heads, tokens, dim, "k_running_mean");
  k_running_mean_kernel<<<blocks_for(static_cast<long>(heads) * dim), kThreads>>>(k, heads, tokens, dim);
  check_launch("k_running_mean_kernel");
}

int k_mean_block_size(const Recipe& r) { return r.k_smoothing_block > 0 ? r.k_smoothing_block : r.tiles.block_k; }

int k_mean_blocks(const Recipe& r, int tokens) {
  if (r.k_smoothing != KSmoothing::block_mean && r.k_smoothing != KSmoothing::block_mean_corrected) return 0;
  const int b = k_mean_block_size(r);
  return b > 0 ? (tokens + b - 1) / b : 0;
}

void smooth_k(float* k, int heads, int tokens, int dim, const Recipe& r, float* block_means) {
  switch (r.k_smoothing) {
    case KSmoothing::none: break;
    case KSmoothing::global_mean: k_global_mean(k, heads, tokens, dim); break;
    case KSmoothing::block_mean:
    case KSmoothing::block_mean_corrected: k_block_mean(k, heads, tokens, dim, k_mean_block_size(r), block_means); break;
    case KSmoothing::running_mean: k_running_mean(k, heads, tokens, dim); break;
  }
}

void quantize_rows_int8(const float* x, int heads, int tokens, int dim, const QuantSpec& spec, std::int8_t* codes, float* scales,
                        int rows_out) {
  const long total = check_total(heads, tokens, dim, "quantize_rows_int8");
  if (rows_out == 0) rows_out = tokens;
  if (rows_out < tokens) throw std::invalid_argument("quantize_rows_int8: rows_out " + std::to_string(rows_out) + " < tokens");
  const Granularity g = spec.granularity;
  if (spec.format != FormatId::int8 ||
      !(g == Granularity::tensor || g == Granularity::head || g == Granularity::token || g == Granularity::block)) {
    throw std::invalid_argument("quantize_rows_int8: takes int8 with tensor, head, token or block granularity, got " +
                                std::string(name_of(spec.format)) + " " + name_of(g));
  }
  validate(spec, heads, tokens, dim);
  DeviceBuffers mem;
  RowQuantParams p{};
  p.heads = heads;
  p.n = tokens;
  p.d = dim;
  p.rows_out = rows_out;
  p.block = g == Granularity::block ? spec.block : tokens;
  p.blocks = (tokens + p.block - 1) / p.block;
  p.f = format_of(spec.format);
  int groups = 1;
  switch (g) {
    case Granularity::tensor: p.group = RowGroup::tensor; groups = 1; break;
    case Granularity::head: p.group = RowGroup::head; groups = heads; break;
    case Granularity::block: p.group = RowGroup::block; groups = heads * p.blocks; break;
    default: p.group = RowGroup::token; groups = heads * tokens; break;
  }
  const float* absmax = nullptr;
  if (spec.rule == ScaleRule::dynamic_absmax) {
    const long rows = static_cast<long>(heads) * tokens;
    const float* row_max = range_absmax(x, rows, dim, dim, dim, mem);  // [H][N]
    switch (g) {
      case Granularity::tensor: absmax = range_absmax(row_max, 1, rows, rows, rows, mem); break;
      case Granularity::head: absmax = range_absmax(row_max, heads, tokens, tokens, tokens, mem); break;
      case Granularity::block: absmax = range_absmax(row_max, heads, tokens, tokens, p.block, mem); break;
      default: absmax = row_max; break;
    }
  }
  float* scale = mem.alloc<float>(groups);
  float* inv = mem.alloc<float>(groups);
  group_scales(spec, absmax, groups, scale, inv, mem);
  if (rows_out > tokens) {  // zero padding rows
    fill_bytes(codes, 0, static_cast<std::size_t>(heads) * rows_out * dim);
    fill_bytes(scales, 0, sizeof(float) * static_cast<std::size_t>(heads) * rows_out);
  }
  p.x = x;
  p.scale = scale;
  p.inv = inv;
  p.codes = codes;
  p.scales_out = scales;
  quantize_rows_kernel<<<blocks_for(total), kThreads>>>(p);
  check_launch("quantize_rows_kernel");
}

void round_rows(const float* x, int heads, int tokens, int dim, FormatId format, float* y) {
  const long total = check_total(heads, tokens, dim, "round_rows");
  if (format_of(format).kind == Kind::integer) {
    throw std::invalid_argument(std::string("round_rows: takes a float format, got ") + name_of(format));
  }
  round_kernel<<<blocks_for(total), kThreads>>>(x, total, format_of(format), y);
  check_launch("round_kernel");
}

void quantize_v_e4m3_transposed(const float* v, int heads, int tokens, int dim, const OperandQuant& vq, std::uint16_t* vt,
                                float* v_scales) {
  const long total = check_total(heads, tokens, dim, "quantize_v_e4m3_transposed");
  const QuantSpec& spec = vq.spec;
  const Granularity g = spec.granularity;
  if (spec.format != FormatId::e4m3 ||
      !(vq.unit_scale || g == Granularity::tensor || g == Granularity::head || g == Granularity::channel)) {
    throw std::invalid_argument("quantize_v_e4m3_transposed: takes e4m3 with a unit scale or tensor, head or channel granularity, got " +
                                std::string(name_of(spec.format)) + " " + name_of(g));
  }
  DeviceBuffers mem;
  VQuantParams p{};
  p.v = v;
  p.vt = vt;
  p.v_scales = v_scales;
  p.heads = heads;
  p.n = tokens;
  p.np = padded_tokens(tokens);
  p.d = dim;
  p.unit = vq.unit_scale;
  p.f = format_of(FormatId::e4m3);
  p.group = ChannelGroup::tensor;
  if (!vq.unit_scale) {
    validate(spec, heads, tokens, dim);
    int groups = 1;
    const float* absmax = nullptr;
    const long rows = static_cast<long>(heads) * tokens;
    switch (g) {
      case Granularity::tensor: p.group = ChannelGroup::tensor; groups = 1; break;
      case Granularity::head: p.group = ChannelGroup::head; groups = heads; break;
      default: p.group = ChannelGroup::channel; groups = heads * dim; break;
    }
    if (spec.rule == ScaleRule::dynamic_absmax) {
      if (p.group == ChannelGroup::channel) {
        float* cm = mem.alloc<float>(static_cast<std::size_t>(heads) * dim);
        channel_absmax_kernel<<<blocks_for(static_cast<long>(heads) * dim), kThreads>>>(v, heads, tokens, dim, cm);
        check_launch("channel_absmax_kernel");
        absmax = cm;
      } else {
        const float* row_max = range_absmax(v, rows, dim, dim, dim, mem);
        absmax = p.group == ChannelGroup::tensor ? range_absmax(row_max, 1, rows, rows, rows, mem)
                                                 : range_absmax(row_max, heads, tokens, tokens, tokens, mem);
      }
    }
    float* scale = mem.alloc<float>(groups);
    float* inv = mem.alloc<float>(groups);
    group_scales(spec, absmax, groups, scale, inv, mem);
    p.scale = scale;
    p.inv = inv;
  }
  fill_bytes(vt, 0, sizeof(std::uint16_t) * heads * dim * p.np);  // padding keys are zero
  quantize_v_kernel<<<blocks_for(total), kThreads>>>(p);
  check_launch("quantize_v_kernel");
}

std::string quantizer_not_covered(const Recipe& r) {
  for (const OperandQuant* o : {&r.q, &r.k, &r.p, &r.v}) {
    if (o->unit_scale) continue;
    if (o->spec.divide) return "the GPU paths quantize by multiplying with the scale's reciprocal; /div (a division) is emulator-only";
    if (o->spec.amax_mul || o->spec.half_away || o->spec.scale_eps != 0 || o->spec.signed_max || o->spec.codes_fp32 || o->spec.scale_max != 0) {
      return "the GPU paths quantize with the lab's rule; /amax:mul, /amax:signed, /round:away, /eps, /codes:fp32 and /max are emulator-only";
    }
    if (o->spec.granularity == Granularity::kvhead) return "kvhead scales (one per GQA group, FlashAttention-3's Q descale) are emulator-only";
    if (o->spec.granularity == Granularity::thread) return "thread scales (a lane's strided rows, SageAttention 2's per-thread int8) are emulator-only";
  }
  return "";
}

std::string prepare_not_covered(const Recipe& r, int dim, bool with_v) {
  if (std::string why = quantizer_not_covered(r); !why.empty()) return why;
  const auto float_rounded = [](const OperandQuant& o) { return o.unit_scale && format_of(o.spec.format).kind != Kind::integer; };
  if (float_rounded(r.q) && float_rounded(r.k)) {
    if (with_v) return "Q and K rounded to a float format feed flash_dot4, which takes V as values (with_v = false)";
  } else {
    for (const OperandQuant* o : {&r.q, &r.k}) {
      const Granularity g = o->spec.granularity;
      if (o->unit_scale || o->spec.format != FormatId::int8 ||
          !(g == Granularity::tensor || g == Granularity::head || g == Granularity::token || g == Granularity::block)) {
        return "Q and K: the preparation kernels write int8 codes with tensor, head, token or block scales, or values rounded to a float "
               "format (no scale)";
      }
    }
  }
  const Granularity vg = r.v.spec.granularity;
  if (with_v && (r.v.spec.format != FormatId::e4m3 ||
      !(r.v.unit_scale || vg == Granularity::tensor || vg == Granularity::head || vg == Granularity::channel))) {
    return "V: the preparation kernels write e4m3 codes with a unit scale or tensor, head or channel scales";
  }
  if (r.rotation == Rotation::hadamard && (!is_power_of_two(dim) || dim > kMaxHadamardDim)) {
    return "hadamard rotation needs a power-of-two head dim, at most " + std::to_string(kMaxHadamardDim);
  }
  if (with_v && r.v_smoothing) return "V smoothing has no preparation kernel (kernels that read V as values subtract its mean on the host)";
  if (r.q_smoothing && r.tiles.block_q <= 0) return "Q smoothing needs a positive query tile (tiles.block_q)";
  if ((r.k_smoothing == KSmoothing::block_mean || r.k_smoothing == KSmoothing::block_mean_corrected) && k_mean_block_size(r) <= 0) {
    return "K block means need a positive block (k_smoothing_block or tiles.block_k)";
  }
  return "";
}

DevicePrepared prepare_device(const float* q, const float* k, const float* v, int q_heads, int kv_heads, int tokens, int dim,
                              const Recipe& r, DeviceBuffers& mem, const PrepareOptions& opt) {
  if (q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0 || tokens <= 0 || dim <= 0) {
    throw std::invalid_argument("prepare_device: heads must be positive with q_heads a multiple of kv_heads, tokens and dim positive");
  }
  const std::string why = prepare_not_covered(r, dim, opt.with_v);
  if (!why.empty()) throw std::invalid_argument("prepare_device: " + why);
  DevicePrepared d;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.tokens = tokens;
  d.dim = dim;
  d.padded = padded_tokens(tokens);
  d.k_rows = opt.pad_k_rows ? d.padded : tokens;
  d.k_mean_blocks = k_mean_blocks(r, tokens);
  const std::size_t qn = static_cast<std::size_t>(q_heads) * tokens * dim, kn = static_cast<std::size_t>(kv_heads) * tokens * dim;
  d.q_float = mem.alloc<float>(qn);
  d.k_float = mem.alloc<float>(kn);
  copy_on_device(d.q_float, q, sizeof(float) * qn);
  copy_on_device(d.k_float, k, sizeof(float) * kn);
  if (r.rotation == Rotation::hadamard) {
    hadamard_rows(d.q_float, q_heads, tokens, dim);
    hadamard_rows(d.k_float, kv_heads, tokens, dim);
  }
  if (d.k_mean_blocks > 0) d.k_block_means = mem.alloc<float>(static_cast<std::size_t>(kv_heads) * d.k_mean_blocks * dim);
  smooth_k(d.k_float, kv_heads, tokens, dim, r, d.k_block_means);
  d.q_rot = d.q_float;
  if (r.q_smoothing) {
    // The rotated Q stays for the q . mu_b correction of K block means; the smoothed one is quantized.
    d.q_tiles = (tokens + r.tiles.block_q - 1) / r.tiles.block_q;
    d.q_float = mem.alloc<float>(qn);
    copy_on_device(d.q_float, d.q_rot, sizeof(float) * qn);
    d.q_block_means = mem.alloc<float>(static_cast<std::size_t>(q_heads) * d.q_tiles * dim);
    k_block_mean(d.q_float, q_heads, tokens, dim, r.tiles.block_q, d.q_block_means);  // the same means, over query tiles
  }
  if (r.q.unit_scale) {  // float Q and K (prepare_not_covered): values rounded to their formats
    d.q_values = mem.alloc<float>(qn);
    d.k_values = mem.alloc<float>(kn);
    round_rows(d.q_float, q_heads, tokens, dim, r.q.spec.format, d.q_values);
    round_rows(d.k_float, kv_heads, tokens, dim, r.k.spec.format, d.k_values);
  } else {
    d.q_codes = mem.alloc<std::int8_t>(qn);
    d.q_scales = mem.alloc<float>(static_cast<std::size_t>(q_heads) * tokens);
    quantize_rows_int8(d.q_float, q_heads, tokens, dim, r.q.spec, d.q_codes, d.q_scales);
    d.k_codes = mem.alloc<std::int8_t>(static_cast<std::size_t>(kv_heads) * d.k_rows * dim);
    d.k_scales = mem.alloc<float>(static_cast<std::size_t>(kv_heads) * d.k_rows);
    quantize_rows_int8(d.k_float, kv_heads, tokens, dim, r.k.spec, d.k_codes, d.k_scales, d.k_rows);
  }
  if (!opt.with_v) return d;
  d.vt = mem.alloc<std::uint16_t>(static_cast<std::size_t>(kv_heads) * dim * d.padded);
  d.v_scales = mem.alloc<float>(static_cast<std::size_t>(kv_heads) * dim);
  quantize_v_e4m3_transposed(v, kv_heads, tokens, dim, r.v, d.vt, d.v_scales);
  return d;
}

PreparedHost prepare_on_device(const Problem& p, const Recipe& r, const PrepareOptions& opt) {
  validate(p);
  DeviceBuffers mem;
  const float* q = mem.upload(p.q.data);
  const float* k = mem.upload(p.k.data);
  const float* v = mem.upload(p.v.data);
  const DevicePrepared d = prepare_device(q, k, v, p.q.heads, p.k.heads, p.q.tokens, p.q.dim, r, mem, opt);
  PreparedHost h;
  h.q_heads = d.q_heads;
  h.kv_heads = d.kv_heads;
  h.tokens = d.tokens;
  h.dim = d.dim;
  h.k_rows = d.k_rows;
  h.padded = d.padded;
  h.k_mean_blocks = d.k_mean_blocks;
  const std::size_t hq = d.q_heads, hkv = d.kv_heads, n = d.tokens, dim = d.dim;
  h.q_tiles = d.q_tiles;
  h.q_rot = download(d.q_rot, hq * n * dim);
  if (d.q_block_means != nullptr) h.q_block_means = download(d.q_block_means, hq * d.q_tiles * dim);
  h.q_float = download(d.q_float, hq * n * dim);
  h.k_float = download(d.k_float, hkv * n * dim);
  if (d.k_block_means != nullptr) h.k_block_means = download(d.k_block_means, hkv * d.k_mean_blocks * dim);
  if (d.q_codes != nullptr) {
    h.q_codes = download(d.q_codes, hq * n * dim);
    h.q_scales = download(d.q_scales, hq * n);
    h.k_codes = download(d.k_codes, hkv * d.k_rows * dim);
    h.k_scales = download(d.k_scales, hkv * d.k_rows);
  } else {
    h.q_values = download(d.q_values, hq * n * dim);
    h.k_values = download(d.k_values, hkv * n * dim);
  }
  if (d.vt != nullptr) {
    h.vt = download(d.vt, hkv * dim * d.padded);
    h.v_scales = download(d.v_scales, hkv * dim);
  }
  return h;
}

}  // namespace qattn::gpu
