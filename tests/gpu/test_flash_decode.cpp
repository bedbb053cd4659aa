// The split-K decode kernels against the emulator (labelled gpu; run on the H200 machine): the
// bit-faithful reference (flash_decode) and the fast path (flash_decode_fast). Random inputs are
// fresh each run (the seed is printed); the shipped real dump is used too.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/decode/flash_decode_fast.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"  // device_name()
#include "reference/attention.hpp"
#include "reference/metrics.hpp"
#include "tests/catch.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;
using gpu::DecodeV;

namespace {

enum class KScales { packed16, token };  // K: fp16 scale per 32 channels (the DOT4 layout) or fp32 per key

// int8 Q/K (dynamic absmax), P e4m3 * 448 (or int8 * 127), V as the kernel reads it, exact QK^T,
// fp32 PV, key tile 64, `split_k` splits.
Recipe decode_recipe(DecodeV v, int split_k, KScales ks = KScales::packed16, FormatId p_format = FormatId::e4m3) {
  Recipe r;
  r.q.unit_scale = r.k.unit_scale = false;
  r.q.spec.format = r.k.spec.format = FormatId::int8;
  if (ks == KScales::packed16) {
    r.q.spec.granularity = r.k.spec.granularity = Granularity::group;
    r.q.spec.block = r.k.spec.block = 32;
    r.k.spec.scale_format = FormatId::fp16;  // Q keeps fp32 scales, as the document's Q quantizer
  } else {
    r.q.spec.granularity = r.k.spec.granularity = Granularity::token;
  }
  r.p.unit_scale = false;
  r.p.spec.format = p_format;
  r.p.spec.rule = ScaleRule::static_multiplier;
  r.p.spec.multiplier = p_format == FormatId::int8 ? 127 : 448;
  r.v.unit_scale = false;
  switch (v) {
    case DecodeV::e4m3:
      r.v.spec.format = FormatId::e4m3;
      r.v.spec.granularity = Granularity::channel;
      break;
    case DecodeV::q8_0:
    case DecodeV::q4_0:
      r.v.spec.format = v == DecodeV::q8_0 ? FormatId::int8 : FormatId::int4;
      r.v.spec.granularity = Granularity::group;
      r.v.spec.block = 32;
      r.v.spec.scale_format = FormatId::fp16;
      break;
  }
  r.qk_acc.kind = Accumulator::Kind::exact;
  r.pv_acc.kind = Accumulator::Kind::fp32;
  r.tiles.block_k = 64;
  r.split_k = split_k;
  return r;
}

// The last token's query row, causal (decode).
Problem decode_problem(int hq, int hkv, int n, int d, std::uint64_t seed) {
  Problem p = test::random_problem(hq, hkv, n, d, seed);
  for (float& x : p.q.data) x *= 2.0f;  // a peakier softmax: P spread over several decades
  p.causal = true;
  p.rows = RowSelection::range_of(n - 1, n);
  return p;
}

struct Scores {
  double format_db = 0, kernel_db = 0;
};

// Kernel error against the emulator on outputs [Hq][d] of one batch entry, beside the recipe's own
// error against float64; prints enough to diagnose a failure.
Scores score(const Problem& p, const Recipe& r, const float* got, const std::string& what) {
  const ReferenceResult ref = reference_attention(p);
  const EmulatorResult emu = emulate(p, r);
  const std::size_t count = emu.out.data.size();
  std::size_t unwritten = 0, equal = 0, worst = 0;
  double worst_err = 0;
  for (std::size_t i = 0; i < count; ++i) {
    unwritten += std::isfinite(got[i]) ? 0 : 1;
    equal += got[i] == emu.out.data[i] ? 1 : 0;
    const double err = std::fabs(static_cast<double>(got[i]) - emu.out.data[i]);
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
  }
  INFO(what);
  REQUIRE(unwritten == 0);  // the output and the partials were poisoned with NaN before the launch
  const std::vector<double> e(emu.out.data.begin(), emu.out.data.end()), g(got, got + count);
  Scores s;
  s.format_db = compare(ref.out.data, e).sqnr_db;
  s.kernel_db = compare(e, g).sqnr_db;
  std::printf("%-44s recipe vs float64 %6.2f dB, kernel vs emulator %7.2f dB, bit-equal %zu/%zu, worst |err| %.3g at [head %zu, ch %zu] (%.9g vs %.9g)\n",
              what.c_str(), s.format_db, s.kernel_db, equal, count, worst_err, worst / p.q.dim, worst % p.q.dim, static_cast<double>(got[worst]),
              static_cast<double>(emu.out.data[worst]));
  return s;
}

using DecodeRun = std::function<std::vector<float>(const gpu::DecodeInputs&)>;

// Kernel error well under format error: at least 30 dB below it (the criterion). A path
// that reorders fp32 sums (the fast one) is held to that or to 130 dB, whichever is lower: one fp32
// rounding is 2^-24 (144 dB) and a reordered sum differs by a few of them, so a recipe whose own
// error is within 30 dB of that (a cache of one key: softmax weight exactly 1) leaves no 30 dB to keep.
constexpr double kReorderedFloorDb = 130;
double required_db(double format_db, bool reordered) { return reordered ? std::min(format_db + 30, kReorderedFloorDb) : format_db + 30; }

void check_decode_with(const Problem& p, const Recipe& r, const std::string& what, const DecodeRun& run, bool reordered) {
  INFO(what);
  REQUIRE(gpu::decode_not_covered(p, r).empty());
  const std::vector<float> got = run(gpu::make_decode_inputs(p, r));
  REQUIRE(got.size() == static_cast<std::size_t>(p.q.heads) * p.q.dim);
  const Scores s = score(p, r, got.data(), what);
  // What 30 dB allows the reference: fp32 rounding differences of exp2f and, rarely, a P code on
  // the other side of a rounding boundary; everything else is the emulator's sequence of operations.
  CHECK(s.kernel_db > required_db(s.format_db, reordered));
}

void check_decode(const Problem& p, const Recipe& r, const std::string& what, const gpu::DecodeTuning& tuning = {}) {
  check_decode_with(p, r, what, [&tuning](const gpu::DecodeInputs& in) { return gpu::flash_decode(in, tuning); }, false);
}

// The fast path, held to the same criterion: 30 dB below the recipe's own error leaves room for
// its P V rounding (per-warp sums on the matrix units, q8_0 / q4_0 scales folded into P as two fp16
// terms of 22 bits, the warps' sums added at the end: relative errors near 2^-22 per product, over
// 120 dB down) and nothing more.
void check_decode_fast(const Problem& p, const Recipe& r, const std::string& what, const gpu::DecodeFastTuning& tuning = {}) {
  check_decode_with(p, r, what + " [fast]", [&tuning](const gpu::DecodeInputs& in) { return gpu::flash_decode_fast(in, tuning); }, true);
}

std::string label(const char* shape, DecodeV v, int split_k, KScales ks) {
  return std::string(shape) + " V " + gpu::decode_v_name(v) + " split " + std::to_string(split_k) + (ks == KScales::packed16 ? " K packed16" : " K token");
}

std::uint32_t bits_of_float(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// The cases both paths meet against the emulator: `check` runs one path on one problem and recipe.
using Check = std::function<void(const Problem&, const Recipe&, const std::string&)>;

void splits_and_formats(const Check& check) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  // N = 1000: 16 tiles of 64, the last one ragged (40 keys); split 7 gives 6 splits of 3, 3, 3, 3, 3,
  // 1 tiles and one empty split. Hq/Hkv = 8/2: four query heads share each K/V head.
  const Problem p = decode_problem(8, 2, 1000, 128, seed);
  for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0})
    for (int split : {1, 4, 7})
      for (KScales ks : {KScales::packed16, KScales::token}) check(p, decode_recipe(v, split, ks), label("8/2x1000x128", v, split, ks));
}

void shapes_masks_and_recipes(const Check& check) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  {
    // Three query heads per K/V head (the reference: one head per PV item; the fast path: one head a
    // block, three blocks per K/V head), d = 64, split 5 of 8 tiles.
    const Problem p = decode_problem(6, 2, 500, 64, seed);
    for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) check(p, decode_recipe(v, 5), label("6/2x500x64", v, 5, KScales::packed16));
  }
  {
    // Eight query heads per K/V head at d = 256 and d = 32, twelve (the fast path: three blocks of
    // four heads), and plain multi-head attention (group 1).
    const Problem p = decode_problem(16, 2, 700, 256, seed + 1);
    for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) check(p, decode_recipe(v, 3), label("16/2x700x256", v, 3, KScales::packed16));
    const Problem narrow = decode_problem(8, 1, 300, 32, seed + 4);
    for (DecodeV v : {DecodeV::e4m3, DecodeV::q4_0}) check(narrow, decode_recipe(v, 2), label("8/1x300x32", v, 2, KScales::packed16));
    const Problem twelve = decode_problem(12, 1, 900, 128, seed + 5);
    check(twelve, decode_recipe(DecodeV::q4_0, 4), label("12/1x900x128", DecodeV::q4_0, 4, KScales::packed16));
    const Problem mha = decode_problem(4, 4, 333, 128, seed + 2);
    check(mha, decode_recipe(DecodeV::q8_0, 2, KScales::token), label("4/4x333x128", DecodeV::q8_0, 2, KScales::token));
  }
  const Problem p = decode_problem(8, 2, 1000, 128, seed + 3);
  {
    // A sliding window (the first visible key inside a tile), and a query in the middle of the cache
    // (keys past it masked, the last tile partly visible).
    Problem w = p;
    w.window = 300;
    check(w, decode_recipe(DecodeV::q8_0, 4), "window 300, split 4, q8_0 V");
    Problem mid = p;
    mid.rows = RowSelection::range_of(600, 601);
    check(mid, decode_recipe(DecodeV::e4m3, 3), "causal row 600 of 1000, split 3, e4m3 V");
  }
  {
    // Key tiles of 32, 128 and 256 (the fast path: one warp per block at 256 keys), a group of 64 channels, int8 P (127: not an exact P*V product
    // with q8_0, so the reference's multiply-then-add path), P's denominator from float P, e4m3 V
    // with unit scale (the reference's fused path).
    Recipe r = decode_recipe(DecodeV::q4_0, 6);
    r.tiles.block_k = 32;
    check(p, r, "tile 32, split 6, q4_0 V");
    r = decode_recipe(DecodeV::e4m3, 2);
    r.tiles.block_k = 128;
    check(p, r, "tile 128, split 2, e4m3 V");
    r = decode_recipe(DecodeV::q8_0, 2);
    r.tiles.block_k = 256;
    check(p, r, "tile 256, split 2, q8_0 V");
    r = decode_recipe(DecodeV::q8_0, 4);
    r.q.spec.block = r.k.spec.block = 64;
    check(p, r, "Q/K group 64, split 4, q8_0 V");
    r = decode_recipe(DecodeV::q4_0, 4);  // the fast path: two spans share a key's scale
    r.v.spec.block = 64;
    check(p, r, "V group 64, split 4, q4_0 V");
    r = decode_recipe(DecodeV::q8_0, 4, KScales::packed16, FormatId::int8);
    check(p, r, "int8 P (127), split 4, q8_0 V");
    r = decode_recipe(DecodeV::e4m3, 4);
    r.denominator = Denominator::float_p;
    check(p, r, "float-P denominator, split 4, e4m3 V");
    r = decode_recipe(DecodeV::e4m3, 4);
    r.v.unit_scale = true;
    check(p, r, "e4m3 V unit scale (fused PV), split 4");
  }
}

void batch_of_lengths(const DecodeRun& run, const std::string& path, bool reordered) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) {
    const Recipe r = decode_recipe(v, 4);
    std::vector<Problem> problems;
    std::vector<gpu::DecodeInputs> parts;
    for (int n : {1000, 77, 640, 1}) {  // 1: a cache of one key
      problems.push_back(decode_problem(8, 2, n, 128, seed + static_cast<std::uint64_t>(n)));
      parts.push_back(gpu::make_decode_inputs(problems.back(), r));
    }
    const std::vector<float> got = run(gpu::stack_decode_inputs(parts));
    REQUIRE(got.size() == problems.size() * 8 * 128);
    for (std::size_t b = 0; b < problems.size(); ++b) {
      const std::string what = path + "batch entry " + std::to_string(b) + " (N = " + std::to_string(problems[b].k.tokens) + "), V " + gpu::decode_v_name(v);
      const Scores s = score(problems[b], r, got.data() + b * 8 * 128, what);
      CHECK(s.kernel_db > required_db(s.format_db, reordered));  // as check_decode and check_decode_fast
    }
  }
}

void shipped_dump(const Check& check) {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    LayerSlice s = load_layer(info, layer, req);
    Problem& p = s.problem;
    p.causal = true;
    p.rows = RowSelection::range_of(p.q.tokens - 1, p.q.tokens);  // decode: the last token
    check(p, decode_recipe(DecodeV::e4m3, 4), std::string("layer ") + layer + " e4m3 V split 4");
    check(p, decode_recipe(DecodeV::q8_0, 7), std::string("layer ") + layer + " q8_0 V split 7");
    check(p, decode_recipe(DecodeV::q4_0, 1), std::string("layer ") + layer + " q4_0 V split 1");
  }
}

void reference(const Problem& p, const Recipe& r, const std::string& what) { check_decode(p, r, what); }
void fast(const Problem& p, const Recipe& r, const std::string& what) { check_decode_fast(p, r, what); }

}  // namespace

TEST_CASE("decode: the device's format decoders and P rounding equal the codec bit for bit", "[gpu][decode]") {
  std::printf("device: %s\n", gpu::device_name().c_str());
  const struct {
    FormatId f;
    std::uint32_t codes;
  } formats[] = {{FormatId::e4m3, 256}, {FormatId::fp16, 65536}, {FormatId::int8, 256}, {FormatId::int4, 16}};
  for (const auto& [f, n] : formats) {
    const Format fmt = format_of(f);
    std::vector<std::uint32_t> codes;
    for (std::uint32_t c = 0; c < n; ++c)
      if (!is_nan_code(fmt, c) && std::isfinite(decode(fmt, c))) codes.push_back(c);  // the caches hold finite codes only
    const std::vector<float> host_side = [&] {
      std::vector<float> v;
      for (std::uint32_t c : codes) {
        v.push_back(f == FormatId::e4m3 ? gpu::decode_e4m3_bits(c) : f == FormatId::fp16 ? gpu::decode_fp16_bits(c) : f == FormatId::int4 ? gpu::decode_int4_bits(c)
                                                                                                                                               : static_cast<float>(static_cast<std::int8_t>(c)));
      }
      return v;
    }();
    const std::vector<float> device_side = gpu::device_decode_codes(f, codes);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < codes.size(); ++i) {
      const std::uint32_t want = bits_of_float(static_cast<float>(decode(fmt, codes[i])));
      if (bits_of_float(device_side[i]) != want || bits_of_float(host_side[i]) != want) {
        if (bad++ < 5) std::printf("%s code 0x%x: device %a, host %a, codec %a\n", name_of(f), codes[i], device_side[i], host_side[i], decode(fmt, codes[i]));
      }
    }
    INFO(name_of(f));
    CHECK(bad == 0);
  }
  // P rounding: every value of each P format, the midpoints between neighbours and the floats next to
  // them, beyond max finite, and random products x * multiplier.
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 gen(seed);
  for (const auto& [f, mult] : {std::pair{FormatId::e4m3, 448.0f}, std::pair{FormatId::int8, 127.0f}, std::pair{FormatId::e4m3fnuz, 240.0f},
                                std::pair{FormatId::e5m2, 57344.0f}, std::pair{FormatId::fp16, 1.0f}, std::pair{FormatId::bf16, 1.0f},
                                std::pair{FormatId::int4, 7.0f}, std::pair{FormatId::fp32, 1.0f}, std::pair{FormatId::e5m2fnuz, 57344.0f},
                                std::pair{FormatId::e2m1, 6.0f}}) {
    const Format fmt = format_of(f);
    std::vector<float> ys = {0.0f, static_cast<float>(max_finite(fmt)), std::nextafter(static_cast<float>(max_finite(fmt)), INFINITY), 3.0e38f};
    if (fmt.bits <= 16) {
      std::vector<double> values;
      for (std::uint32_t c = 0; c < (1u << fmt.bits); ++c) {
        const double v = decode(fmt, c);
        if (std::isfinite(v) && v >= 0) values.push_back(v);
      }
      std::sort(values.begin(), values.end());
      for (std::size_t i = 0; i + 1 < values.size(); ++i) {
        const float mid = static_cast<float>((values[i] + values[i + 1]) / 2);
        ys.insert(ys.end(), {static_cast<float>(values[i]), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
      }
    }
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> xs;
    for (int k = 0; k < 4096; ++k) xs.push_back(std::ldexp(unit(gen), -static_cast<int>(gen() % 24)));
    const std::vector<float> got_y = gpu::device_round_p(f, 1.0f, ys), got_x = gpu::device_round_p(f, mult, xs);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ys.size(); ++i) {
      const float want = static_cast<float>(decode(fmt, quantize(fmt, ys[i], 1.0f)));
      if (bits_of_float(got_y[i]) != bits_of_float(want) && bad++ < 5) std::printf("%s: round(%a) device %a, codec %a\n", name_of(f), ys[i], got_y[i], want);
    }
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float want = static_cast<float>(decode(fmt, quantize(fmt, xs[i], mult)));
      if (bits_of_float(got_x[i]) != bits_of_float(want) && bad++ < 5) std::printf("%s: round(%a * %g) device %a, codec %a\n", name_of(f), xs[i], mult, got_x[i], want);
    }
    INFO(name_of(f));
    CHECK(bad == 0);
  }
}
TEST_CASE("decode vs emulator: e4m3 / q8_0 / q4_0 V, split 1, 4 and 7 (not dividing 16 tiles), ragged N, GQA", "[gpu][decode]") {
  splits_and_formats(reference);
}

TEST_CASE("decode vs emulator: head dims, group sizes, masks, P formats and denominators", "[gpu][decode]") {
  shapes_masks_and_recipes(reference);
}

TEST_CASE("decode vs emulator: a batch of caches of different lengths", "[gpu][decode]") {
  batch_of_lengths([](const gpu::DecodeInputs& in) { return gpu::flash_decode(in); }, "", false);
}

TEST_CASE("decode vs emulator on the shipped real dump", "[gpu][decode]") { shipped_dump(reference); }

TEST_CASE("decode: tuning changes no bit", "[gpu][decode]") {
  const Problem p = decode_problem(8, 2, 1000, 128, 11);
  for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) {
    const gpu::DecodeInputs in = gpu::make_decode_inputs(p, decode_recipe(v, 7));
    gpu::DecodeTuning small, mid, large;  // multiples of 64: valid on wave64 devices too
    small.threads = 64;
    small.merge_threads = 64;
    mid.threads = 192;  // not a power of two: K rows split unevenly over the threads
    mid.merge_threads = 192;
    large.threads = 128;
    large.merge_threads = 1024;
    const std::vector<float> a = gpu::flash_decode(in), b = gpu::flash_decode(in, small), c = gpu::flash_decode(in, mid),
                             e = gpu::flash_decode(in, large);
    INFO(gpu::decode_v_name(v));
    CHECK(a == b);
    CHECK(a == c);
    CHECK(a == e);
  }
}

// ---- the fast path (flash_decode_fast): the same cases, 30 dB below the recipe's error ----

TEST_CASE("decode fast vs emulator: e4m3 / q8_0 / q4_0 V, split 1, 4 and 7, ragged N, GQA", "[gpu][decode][decode_fast]") {
  splits_and_formats(fast);
}

TEST_CASE("decode fast vs emulator: head dims, GQA groups and head chunks, masks, tiles, P formats and denominators", "[gpu][decode][decode_fast]") {
  shapes_masks_and_recipes(fast);
}

TEST_CASE("decode fast vs emulator: a batch of caches of different lengths", "[gpu][decode][decode_fast]") {
  batch_of_lengths([](const gpu::DecodeInputs& in) { return gpu::flash_decode_fast(in); }, "[fast] ", true);
}

TEST_CASE("decode fast vs emulator: a long cache, many tiles per warp", "[gpu][decode][decode_fast]") {
  // 16384 keys, split 3: 86 tiles a split, about 29 per warp of three (d = 128), so every warp
  // rescales its sums many times and meets the others' running max and row sums every round.
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const Problem p = decode_problem(8, 2, 16384, 128, seed);
  for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) check_decode_fast(p, decode_recipe(v, 3), label("8/2x16384x128", v, 3, KScales::packed16));
}

TEST_CASE("decode fast vs emulator on the shipped real dump", "[gpu][decode][decode_fast]") { shipped_dump(fast); }

TEST_CASE("decode fast: tuning changes no bit", "[gpu][decode][decode_fast]") {
  const Problem p = decode_problem(8, 2, 1000, 128, 11);
  for (DecodeV v : {DecodeV::e4m3, DecodeV::q8_0, DecodeV::q4_0}) {
    const gpu::DecodeInputs in = gpu::make_decode_inputs(p, decode_recipe(v, 7));
    gpu::DecodeFastTuning two, wide;  // merge threads: multiples of 64, valid on wave64 devices too
    two.stages = 2;
    two.merge_threads = 64;
    wide.merge_threads = 1024;
    const std::vector<float> a = gpu::flash_decode_fast(in), b = gpu::flash_decode_fast(in, two), c = gpu::flash_decode_fast(in, wide);
    INFO(gpu::decode_v_name(v));
    REQUIRE(a.size() == b.size());
    CHECK(a == b);
    CHECK(a == c);
  }
}

TEST_CASE("decode fast: what it does not cover is one clear error", "[gpu][decode][decode_fast]") {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no std::invalid_argument)");
  };
  // A V group of 16: a scale would change inside one 32-channel mma operand, so it is refused.
  const Problem mha = decode_problem(4, 4, 200, 128, 5);
  Recipe r = decode_recipe(DecodeV::q8_0, 2);
  r.v.spec.block = 16;
  const gpu::DecodeInputs small_group = gpu::make_decode_inputs(mha, r);
  const std::string m1 = message([&] { (void)gpu::flash_decode_fast(small_group); });
  INFO(m1);
  CHECK(m1.find("v_group") != std::string::npos);
  // A head dim the fast path has no kernel for (the reference covers every multiple of 32).
  const gpu::DecodeInputs odd_dim = gpu::make_decode_inputs(decode_problem(4, 4, 200, 96, 5), decode_recipe(DecodeV::e4m3, 2));
  const std::string m2 = message([&] { (void)gpu::flash_decode_fast(odd_dim); });
  INFO(m2);
  CHECK(m2.find("head dim 96") != std::string::npos);
  // An e4m3 NaN code in V (the matrix units would carry it into the output even at P = 0).
  gpu::DecodeInputs nan_code = gpu::make_decode_inputs(mha, decode_recipe(DecodeV::e4m3, 2));
  nan_code.v_codes[5] = 0x7F;
  const std::string m4 = message([&] { (void)gpu::flash_decode_fast(nan_code); });
  INFO(m4);
  CHECK(m4.find("v_codes[5]") != std::string::npos);
  // A P multiplier whose powers of two in B would overflow a float.
  gpu::DecodeInputs huge_multiplier = gpu::make_decode_inputs(mha, decode_recipe(DecodeV::q8_0, 2));
  huge_multiplier.p_multiplier = 0x1p110f;
  const std::string m5 = message([&] { (void)gpu::flash_decode_fast(huge_multiplier); });
  INFO(m5);
  CHECK(m5.find("P multiplier") != std::string::npos);
  // A pipeline depth outside [1, 2].
  gpu::DecodeFastTuning deep;
  deep.stages = 3;
  const gpu::DecodeInputs fine = gpu::make_decode_inputs(mha, decode_recipe(DecodeV::q8_0, 2));
  const std::string m3 = message([&] { (void)gpu::flash_decode_fast(fine, deep); });
  INFO(m3);
  CHECK(m3.find("tuning.stages") != std::string::npos);
}
