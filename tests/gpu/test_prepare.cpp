// The preparation kernels (kernels/gpu/prepare/prepare.hpp) against the CPU path (labelled gpu; run on the GPU
// machine): Q and K after the Hadamard rotation, K after its channel means, the block means, int8 Q/K
// codes and per-token scales, e4m3 V codes in the flash_mma Vt layout and the V scales, every array
// compared bit for bit. Random inputs are fresh each run (the seed is printed); the shipped real dump
// is used too.
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/io/dataset_file.hpp"
#include "kernels/numerics/prepare_cpu.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/gpu/dispatch.hpp"
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/prepare/prepare.hpp"
#include "tests/catch.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;

namespace {

int padded_of(int n) { return (n + gpu::kMmaKeyTile - 1) / gpu::kMmaKeyTile * gpu::kMmaKeyTile; }

// flash_mma.hpp's Vt from V's e4m3 codes [Hkv][N][d]: fp16 bits of their values, transposed, keys
// in order, zero padding to Np.
std::vector<std::uint16_t> vt_layout(const std::vector<std::uint32_t>& codes, int hkv, int n, int d) {
  const int np = padded_of(n);
  const Format e4m3 = format_of(FormatId::e4m3), f16 = format_of(FormatId::fp16);
  std::vector<std::uint16_t> vt(static_cast<std::size_t>(hkv) * d * np, 0);
  for (int h = 0; h < hkv; ++h)
    for (int j = 0; j < n; ++j)
      for (int c = 0; c < d; ++c) {
        const std::uint32_t code = codes[(static_cast<std::size_t>(h) * n + j) * d + c];
        vt[(static_cast<std::size_t>(h) * d + c) * np + j] = static_cast<std::uint16_t>(encode(f16, decode(e4m3, code)));
      }
  return vt;
}

// Int8 codes as signed bytes and one scale per (head, token), in `rows` rows per head (zero padding).
void int8_rows(const QuantizedTensor& qt, int rows, std::vector<std::int8_t>& codes, std::vector<float>& scales) {
  const Format i8 = format_of(FormatId::int8);
  codes.assign(static_cast<std::size_t>(qt.heads) * rows * qt.dim, 0);
  scales.assign(static_cast<std::size_t>(qt.heads) * rows, 0.0f);
  for (int h = 0; h < qt.heads; ++h)
    for (int n = 0; n < qt.tokens; ++n) {
      const std::size_t out = static_cast<std::size_t>(h) * rows + n;
      scales[out] = qt.scales[qt.scale_index(h, n, 0)];
      for (int c = 0; c < qt.dim; ++c) {
        codes[out * qt.dim + c] = static_cast<std::int8_t>(decode(i8, qt.codes[(static_cast<std::size_t>(h) * qt.tokens + n) * qt.dim + c]));
      }
    }
}

// The CPU path (the emulator's preparation order: rotation, K smoothing, Q smoothing, quantizers) in the device layouts.
gpu::PreparedHost cpu_prepare(const Problem& p, const Recipe& r, const gpu::PrepareOptions& opt) {
  gpu::PreparedHost e;
  e.q_heads = p.q.heads;
  e.kv_heads = p.k.heads;
  e.tokens = p.q.tokens;
  e.dim = p.q.dim;
  e.padded = padded_of(e.tokens);
  e.k_rows = opt.pad_k_rows ? e.padded : e.tokens;
  TensorF q = p.q, k = p.k;
  if (r.rotation == Rotation::hadamard) {
    hadamard_rows(q);
    hadamard_rows(k);
  }
  e.k_block_means = smooth_k(k, r);
  e.k_mean_blocks = static_cast<int>(e.k_block_means.size() / (static_cast<std::size_t>(e.kv_heads) * e.dim));
  e.q_rot = q.data;
  if (r.q_smoothing) {
    e.q_block_means = smooth_q(q, r.tiles.block_q);
    e.q_tiles = (e.tokens + r.tiles.block_q - 1) / r.tiles.block_q;
  }
  e.q_float = q.data;
  e.k_float = k.data;
  if (r.q.unit_scale) {  // float Q and K: rounded, as the emulator's unit-scale operands
    const Format fq = format_of(r.q.spec.format), fk = format_of(r.k.spec.format);
    for (float x : q.data) e.q_values.push_back(static_cast<float>(round_to(fq, x)));
    for (float x : k.data) e.k_values.push_back(static_cast<float>(round_to(fk, x)));
  } else {
    int8_rows(quantize(q, r.q.spec), e.tokens, e.q_codes, e.q_scales);
    int8_rows(quantize(k, r.k.spec), e.k_rows, e.k_codes, e.k_scales);
  }
  if (!opt.with_v) return e;
  const int hkv = p.v.heads, n = p.v.tokens, d = p.v.dim;
  std::vector<std::uint32_t> v_codes(p.v.size());
  e.v_scales.assign(static_cast<std::size_t>(hkv) * d, 1.0f);
  if (r.v.unit_scale) {
    const Format e4m3 = format_of(FormatId::e4m3);
    for (std::size_t i = 0; i < v_codes.size(); ++i) v_codes[i] = encode(e4m3, static_cast<double>(p.v.data[i]));
  } else {
    const QuantizedTensor v = quantize(p.v, r.v.spec);
    v_codes = v.codes;
    for (int h = 0; h < hkv; ++h)
      for (int c = 0; c < d; ++c) e.v_scales[static_cast<std::size_t>(h) * d + c] = v.scales[v.scale_index(h, 0, c)];
  }
  e.vt = vt_layout(v_codes, hkv, n, d);
  return e;
}

template <typename T>
std::size_t bit_equal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  std::size_t equal = 0;
  for (std::size_t i = 0; i < a.size(); ++i) equal += std::memcmp(&a[i], &b[i], sizeof(T)) == 0 ? 1 : 0;
  return equal;
}

// Every array is checked (CHECK) so that one run reports all that differ; the first difference is
// printed with its bits. The caller REQUIREs the result.
template <typename T>
bool same_bits(const char* name, const std::vector<T>& got, const std::vector<T>& want, std::size_t& total) {
  INFO(name << ": " << got.size() << " elements from the GPU, " << want.size() << " from the CPU");
  CHECK(got.size() == want.size());
  if (got.size() != want.size()) return false;
  const std::size_t equal = bit_equal(got, want);
  if (equal != want.size()) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
      std::uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i], sizeof(T));
      std::memcpy(&w, &want[i], sizeof(T));
      std::printf("%s: first difference at element %zu: GPU bits 0x%llx, CPU bits 0x%llx\n", name, i, static_cast<unsigned long long>(g),
                  static_cast<unsigned long long>(w));
      break;
    }
  }
  INFO(name << ": bit-equal " << equal << "/" << want.size());
  CHECK(equal == want.size());
  total += equal;
  return equal == want.size();
}

void check(const Problem& p, const Recipe& r, const std::string& what, const gpu::PrepareOptions& opt = {}) {
  INFO(what);
  REQUIRE(gpu::prepare_not_covered(r, p.q.dim, opt.with_v).empty());
  const gpu::PreparedHost got = gpu::prepare_on_device(p, r, opt);
  const gpu::PreparedHost want = cpu_prepare(p, r, opt);
  REQUIRE(got.k_rows == want.k_rows);
  REQUIRE(got.padded == want.padded);
  REQUIRE(got.k_mean_blocks == want.k_mean_blocks);
  REQUIRE(got.q_tiles == want.q_tiles);
  std::size_t total = 0;
  bool ok = same_bits("Q after rotation", got.q_rot, want.q_rot, total);
  ok &= same_bits("Q block means", got.q_block_means, want.q_block_means, total);
  ok &= same_bits("Q after rotation and smoothing", got.q_float, want.q_float, total);
  ok &= same_bits("K after rotation and smoothing", got.k_float, want.k_float, total);
  ok &= same_bits("K block means", got.k_block_means, want.k_block_means, total);
  ok &= same_bits("Q values (float formats)", got.q_values, want.q_values, total);
  ok &= same_bits("K values (float formats)", got.k_values, want.k_values, total);
  ok &= same_bits("Q int8 codes", got.q_codes, want.q_codes, total);
  ok &= same_bits("Q scales", got.q_scales, want.q_scales, total);
  ok &= same_bits("K int8 codes", got.k_codes, want.k_codes, total);
  ok &= same_bits("K scales", got.k_scales, want.k_scales, total);
  ok &= same_bits("Vt bytes", got.vt, want.vt, total);
  ok &= same_bits("V scales", got.v_scales, want.v_scales, total);
  std::printf("%s: %zu elements bit-equal%s\n", what.c_str(), total, ok ? "" : " (SOME DIFFER)");
  REQUIRE(ok);
}

// The mma family's operands: int8 Q and K with per-token scales, e4m3 V with per-channel scales.
Recipe mma_recipe() {
  Recipe r;
  r.q.unit_scale = r.k.unit_scale = false;
  r.q.spec.format = r.k.spec.format = FormatId::int8;
  r.q.spec.granularity = r.k.spec.granularity = Granularity::token;
  r.v.unit_scale = false;
  r.v.spec.format = FormatId::e4m3;
  r.v.spec.granularity = Granularity::channel;
  r.tiles.block_k = gpu::kMmaKeyTile;
  return r;
}

struct Variant {
  std::string name;
  Recipe r;
  gpu::PrepareOptions opt;
};

constexpr gpu::PrepareOptions kPlain{false, true};
constexpr gpu::PrepareOptions kPadK{true, true};

std::string options_name(const gpu::PrepareOptions& o) {
  std::string s;
  if (o.pad_k_rows) s += " (K padded to Np)";
  return s;
}

std::vector<Variant> variants() {
  std::vector<Variant> out;
  const Recipe base = mma_recipe();
  out.push_back({"int8 token Q/K, e4m3 channel V", base, kPlain});
  Recipe r = base;
  r.rotation = Rotation::hadamard;
  out.push_back({"hadamard", r, kPadK});
  r.k_smoothing = KSmoothing::global_mean;
  out.push_back({"hadamard + K global mean", r, kPadK});
  r.k_smoothing = KSmoothing::block_mean_corrected;  // blocks of tiles.block_k = 64 keys
  out.push_back({"hadamard + K block means (64, corrected)", r, kPadK});
  r = base;
  r.k_smoothing = KSmoothing::global_mean;
  out.push_back({"K global mean", r, kPlain});
  r.k_smoothing = KSmoothing::block_mean;
  r.k_smoothing_block = 96;  // the last block ragged
  out.push_back({"K block means (96)", r, kPlain});
  r.k_smoothing = KSmoothing::running_mean;
  r.k_smoothing_block = 0;
  out.push_back({"K running mean", r, kPlain});
  r = base;
  r.q.spec.granularity = Granularity::tensor;
  r.k.spec.granularity = Granularity::head;
  r.v.spec.granularity = Granularity::tensor;
  out.push_back({"Q tensor, K head, V tensor scales", r, kPadK});
  r = base;
  r.rotation = Rotation::hadamard;
  r.k_smoothing = KSmoothing::global_mean;
  r.q.spec.granularity = Granularity::block;
  r.q.spec.block = 128;
  r.k.spec.granularity = Granularity::block;
  r.k.spec.block = 100;
  r.v.spec.granularity = Granularity::head;
  out.push_back({"hadamard + K global mean, Q blocks of 128, K blocks of 100, V head scales", r, kPlain});
  r = base;
  r.q.spec.scale_format = FormatId::bf16;
  r.k.spec.scale_format = FormatId::e8m0;
  r.v.unit_scale = true;
  out.push_back({"bf16 Q scales, e8m0 K scales, V rounded to e4m3", r, kPadK});
  r = base;
  r.q.spec.rule = r.k.spec.rule = ScaleRule::static_multiplier;
  r.q.spec.multiplier = 50;
  r.k.spec.multiplier = 20;
  r.v.spec.scale_format = FormatId::e8m0;
  out.push_back({"static Q and K multipliers (50, 20), e8m0 V scales", r, kPlain});
  return out;
}

// K with a channel offset (what smoothing removes), Q wider than K.
Problem prepare_problem(int hq, int hkv, int n, int d, std::uint64_t seed) {
  Problem p = test::random_problem(hq, hkv, n, d, seed);
  for (float& x : p.q.data) x *= 2.0f;
  for (int h = 0; h < hkv; ++h)
    for (int j = 0; j < n; ++j)
      for (int c = 0; c < d; ++c) p.k(h, j, c) += 0.5f * static_cast<float>(c % 7) - 1.5f;
  return p;
}

}  // namespace

TEST_CASE("prepare kernels equal the CPU path bit for bit: rotation, K means, int8 Q/K, e4m3 Vt", "[gpu][prepare]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (int d : {64, 128, 256}) {
    const Problem p = prepare_problem(8, 2, 1000, d, seed + d);  // GQA 4; 1000: not a multiple of 32 or 64
    for (const Variant& v : variants()) check(p, v.r, v.name + " d=" + std::to_string(d) + options_name(v.opt), v.opt);
  }
  // Tiny shapes: fewer keys than one group of 32, one key, one head.
  for (int n : {1, 31, 33}) {
    const Problem p = prepare_problem(3, 1, n, 64, seed + n);
    Recipe r = mma_recipe();
    r.rotation = Rotation::hadamard;
    r.k_smoothing = KSmoothing::block_mean_corrected;
    check(p, r, "hadamard + K block means, N=" + std::to_string(n) + options_name(kPadK), kPadK);
    r.k_smoothing = KSmoothing::global_mean;
    check(p, r, "hadamard + K global mean, N=" + std::to_string(n) + options_name(kPlain), kPlain);
  }
}

TEST_CASE("prepare kernels write what the mma family's host path uploads", "[gpu][prepare]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const Problem p = prepare_problem(4, 2, 1000, 128, seed);
  const Recipe r = mma_recipe();
  const gpu::MmaInputs in = gpu::make_mma_inputs(p, r);
  const gpu::PreparedHost got = gpu::prepare_on_device(p, r, kPlain);
  std::size_t total = 0;
  bool ok = true;
  ok &= same_bits("Q int8 codes", got.q_codes, in.q_codes, total);
  ok &= same_bits("Q scales", got.q_scales, in.q_scales, total);
  ok &= same_bits("K int8 codes", got.k_codes, in.k_codes, total);
  ok &= same_bits("K scales", got.k_scales, in.k_scales, total);
  ok &= same_bits("V scales", got.v_scales, in.v_scales, total);
  // flash_mma.cu lays out the e4m3 values make_mma_inputs hands it widened to fp16, transposed.
  const gpu::PreparedHost wide = gpu::prepare_on_device(p, r, kPadK);
  std::vector<std::uint16_t> halves(in.v_values.size());
  const Format f16 = format_of(FormatId::fp16);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(encode(f16, in.v_values[i]));
  std::vector<std::uint16_t> vt16(static_cast<std::size_t>(in.kv_heads) * in.dim * padded_of(in.tokens), 0);
  for (int h = 0; h < in.kv_heads; ++h)
    for (int j = 0; j < in.tokens; ++j)
      for (int c = 0; c < in.dim; ++c) {
        vt16[(static_cast<std::size_t>(h) * in.dim + c) * padded_of(in.tokens) + j] =
            halves[(static_cast<std::size_t>(h) * in.tokens + j) * in.dim + c];
      }
  ok &= same_bits("Vt e4m3 values widened to fp16", wide.vt, vt16, total);
  REQUIRE(ok);
  // K padded to Np rows: flash_mma.cu's host path pads K codes and scales with zeros.
  REQUIRE(wide.k_rows == padded_of(in.tokens));
  std::size_t k_equal = 0, pad_zero = 0;
  for (int h = 0; h < in.kv_heads; ++h)
    for (int j = 0; j < wide.k_rows; ++j) {
      const std::size_t row = static_cast<std::size_t>(h) * wide.k_rows + j;
      const bool in_range = j < in.tokens;
      const float want_scale = in_range ? in.k_scales[static_cast<std::size_t>(h) * in.tokens + j] : 0.0f;
      bool same = std::memcmp(&wide.k_scales[row], &want_scale, sizeof(float)) == 0;
      for (int c = 0; c < in.dim; ++c) {
        const std::int8_t want = in_range ? in.k_codes[(static_cast<std::size_t>(h) * in.tokens + j) * in.dim + c] : std::int8_t{0};
        same = same && wide.k_codes[row * in.dim + c] == want;
      }
      k_equal += same ? 1 : 0;
      pad_zero += !in_range && same ? 1 : 0;
    }
  REQUIRE(k_equal == static_cast<std::size_t>(in.kv_heads) * wide.k_rows);
  REQUIRE(pad_zero == static_cast<std::size_t>(in.kv_heads) * (wide.k_rows - in.tokens));
  std::printf("mma host path: %zu elements bit-equal\n", total);
}

TEST_CASE("prepare kernels: unrepresentable scales and uncovered recipes are errors, as on the CPU", "[gpu][prepare]") {
  Problem p = prepare_problem(2, 1, 100, 64, 5);
  for (float& x : p.k.data) x = 1e-44f;  // absmax / 127 rounds to fp32 zero
  const Recipe r = mma_recipe();
  REQUIRE_THROWS_AS(quantize(p.k, r.k.spec), std::domain_error);
  REQUIRE_THROWS_AS(gpu::prepare_on_device(p, r), std::domain_error);
  Recipe v_smooth = mma_recipe();
  v_smooth.v_smoothing = true;  // V prepared for the mma kernel: its mean has no kernel
  CHECK_FALSE(gpu::prepare_not_covered(v_smooth, 64).empty());
  CHECK(gpu::prepare_not_covered(v_smooth, 64, false).empty());
  CHECK_THROWS_AS(gpu::prepare_on_device(prepare_problem(2, 1, 100, 64, 6), v_smooth), std::invalid_argument);
  Recipe odd = mma_recipe();
  odd.rotation = Rotation::hadamard;
  CHECK_FALSE(gpu::prepare_not_covered(odd, 96).empty());
}

TEST_CASE("prepare kernels equal the CPU path on the shipped real dump", "[gpu][prepare]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  const LayerSlice s = load_layer(info, "15", req);
  Recipe r = mma_recipe();
  check(s.problem, r, "layer 15 int8 token Q/K, e4m3 channel V");
  r.rotation = Rotation::hadamard;
  r.k_smoothing = KSmoothing::global_mean;
  check(s.problem, r, "layer 15 hadamard + K global mean" + options_name(kPadK), kPadK);
  r.k_smoothing = KSmoothing::block_mean_corrected;
  check(s.problem, r, "layer 15 hadamard + K block means (64, corrected)" + options_name(kPlain), kPlain);
  r.q_smoothing = true;
  r.tiles.block_q = 128;
  check(s.problem, r, "layer 15 hadamard + K block means (corrected) + Q smoothing (128)");
  r.q.unit_scale = r.k.unit_scale = true;  // Q and K rounded to bf16, for flash_dot4 (V not prepared)
  r.q.spec.format = r.k.spec.format = FormatId::bf16;
  check(s.problem, r, "layer 15 bf16 Q/K, hadamard + K block means (corrected) + Q smoothing", gpu::PrepareOptions{false, false});
}
