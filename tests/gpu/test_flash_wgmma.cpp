// The wgmma flash family against the emulator (labelled gpu; run on the H200 machine, sm_90a).
// Random inputs are fresh each run (the seed is printed); the shipped real dump is used too. The
// recipes name the wgmma accumulator presets (kernels/numerics/accumulator.hpp), with the flush
// that states how P V's tiles meet O (flash_wgmma.hpp).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/gpu/dispatch.hpp"
#include "kernels/gpu/wgmma/flash_wgmma.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/emulator_check.hpp"
#include "tests/gpu/matrix_recipes.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;

namespace {

// The measured wgmma presets ("[wgmma-accumulator]"): per tile (one fp32 add per 64 keys) or
// chained into O.
Recipe wgmma_recipe(gpu::QkType qk, gpu::PvType pv, gpu::WgmmaPvAcc acc) {
  const bool tile = acc == gpu::WgmmaPvAcc::per_tile;
  const Accumulator pv_acc = pv == gpu::PvType::e4m3   ? (tile ? h200_e4m3_wgmma_tile_accumulator() : h200_e4m3_wgmma_accumulator())
                             : pv == gpu::PvType::bf16 ? (tile ? h200_wgmma_bf16_tile_accumulator() : h200_wgmma_bf16_accumulator())
                                                       : (tile ? h200_hmma_tile_accumulator() : h200_wgmma_f16_f32_accumulator());
  return test::matrix_recipe(qk, pv, qk == gpu::QkType::bf16 ? h200_wgmma_bf16_accumulator() : h200_wgmma_f16_f32_accumulator(), pv_acc);
}

std::string name(gpu::QkType qk, gpu::PvType pv, gpu::WgmmaPvAcc acc) {
  std::string s = qk == gpu::QkType::int8 ? "int8 QK" : qk == gpu::QkType::bf16 ? "bf16 QK" : "fp16 QK";
  s += pv == gpu::PvType::e4m3 ? " + e4m3 PV" : pv == gpu::PvType::bf16 ? " + bf16 PV" : " + fp16 PV";
  return s + (acc == gpu::WgmmaPvAcc::per_tile ? " (per tile)" : " (into O)");
}

void check(const Problem& p, gpu::QkType qk, gpu::PvType pv, gpu::WgmmaPvAcc acc, const std::string& what) {
  const Recipe r = wgmma_recipe(qk, pv, acc);
  test::check_against_emulator(p, r, gpu::flash_wgmma(gpu::make_mma_inputs(p, r), acc), (name(qk, pv, acc) + " " + what).c_str());
}

// Head dims 64/128/256, 4 query heads on 2 KV heads, N = 1000 (not a multiple of the tiles),
// causal, then a 200-key window on 300 sampled rows.
void check_shapes(gpu::QkType qk, gpu::PvType pv, gpu::WgmmaPvAcc acc, std::uint64_t seed) {
  for (int d : {64, 128, 256}) {
    Problem p = test::random_problem(4, 2, 1000, d, seed + d);
    for (float& x : p.q.data) x *= 2.0f;
    p.causal = true;
    check(p, qk, pv, acc, "d=" + std::to_string(d) + " causal");
    p.causal = false;
    p.window = 200;
    p.rows = RowSelection::sample_of(300, seed);
    check(p, qk, pv, acc, "d=" + std::to_string(d) + " window 200");
  }
}

// 128-key tiles (tiles.block_k = 128): e4m3 P V only, at d 64 and 128. P is rounded against each
// 128-key tile's running max, and per tile the tile's four instructions (32 keys each) start from
// zero before one fp32 add into O (h200_e4m3_wgmma_tile128); into O, the measured chained preset.
Recipe wgmma_recipe_128(gpu::QkType qk, gpu::WgmmaPvAcc acc) {
  Recipe r = wgmma_recipe(qk, gpu::PvType::e4m3, acc);
  if (acc == gpu::WgmmaPvAcc::per_tile) r.pv_acc = h200_e4m3_wgmma_tile128_accumulator();
  r.tiles.block_k = 128;
  return r;
}

void check_128(const Problem& p, gpu::QkType qk, gpu::WgmmaPvAcc acc, const std::string& what) {
  const Recipe r = wgmma_recipe_128(qk, acc);
  const gpu::MmaInputs in = gpu::make_mma_inputs(p, r);
  REQUIRE(in.key_tile == 128);
  test::check_against_emulator(p, r, gpu::flash_wgmma(in, acc), (name(qk, gpu::PvType::e4m3, acc) + " 128-key tiles " + what).c_str());
}

// A refusal's message (printed, for the log) holds `part`.
bool has(const std::string& message, const char* part) {
  std::printf("  %s\n", message.c_str());
  return message.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("wgmma kernel: int8 logits equal the emulator's bit for bit, keys in order", "[gpu][wgmma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (gpu::PvType pv : {gpu::PvType::e4m3, gpu::PvType::fp16})  // e4m3 P stores keys permuted: undone here
    for (int d : {64, 128, 256}) {
      Problem p = test::random_problem(4, 2, 100, d, seed + d);
      for (float& x : p.q.data) x *= 3.0f;
      const Recipe r = wgmma_recipe(gpu::QkType::int8, pv, gpu::WgmmaPvAcc::per_tile);
      const gpu::MmaInputs in = gpu::make_mma_inputs(p, r);
      for (int h = 0; h < 4; ++h) {
        const std::vector<std::int32_t> got = gpu::wgmma_logits(in, h);
        const std::vector<int> want = integer_logit_block(p, r, h, 16, gpu::kMmaKeyTile);
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < gpu::kMmaKeyTile; ++j) {
            INFO("d " << d << " head " << h << " row " << i << " key " << j);
            REQUIRE(got[i * gpu::kMmaKeyTile + j] == want[i * gpu::kMmaKeyTile + j]);
          }
      }
    }
}

TEST_CASE("wgmma kernel vs emulator: every QK/PV pair, both accumulations, head dims, ragged N, causal, window, GQA",
          "[gpu][wgmma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (gpu::QkType qk : {gpu::QkType::int8, gpu::QkType::fp16})
    for (gpu::PvType pv : {gpu::PvType::e4m3, gpu::PvType::fp16})
      for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o}) check_shapes(qk, pv, acc, seed);
}

// bf16 with bf16, and bf16 beside int8 QK^T or e4m3 PV: the pairs the family instantiates.
TEST_CASE("wgmma kernel vs emulator: bf16 pairs, both accumulations, head dims, ragged N, causal, window, GQA",
          "[gpu][wgmma][bf16]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const std::pair<gpu::QkType, gpu::PvType> pairs[] = {
      {gpu::QkType::bf16, gpu::PvType::bf16}, {gpu::QkType::int8, gpu::PvType::bf16}, {gpu::QkType::bf16, gpu::PvType::e4m3}};
  for (const auto& [qk, pv] : pairs)
    for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o}) check_shapes(qk, pv, acc, seed);
}

// bf16 P keeps 2^(s - m) below fp32's normals (down to 2^-133, as bf16 subnormals) where e4m3 and
// fp16 P round it to zero, so the kernel must not flush it (Pv<bf16>::kSubnormalP in flash_wgmma.cu),
// and the bf16 wgmma must multiply subnormal factors (as the accumulator test measured it does).
// Constructed so that only such P reach the output: every query is ones; key 0 is 11.125 in every
// channel (score 712 / 8 = 89, 128.4 in log2 units) with V = 0; the other 63 keys are zero (score 0,
// so P = 2^-128.4, a bf16 subnormal) with V = 2^100. The output, 63 P 2^100 / l, about 2^-22.4, is
// zero wherever such P is flushed.
TEST_CASE("wgmma kernel vs emulator: bf16 P below fp32's normals", "[gpu][wgmma][bf16]") {
  Problem p = test::random_problem(2, 1, 64, 64, 29);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 64; ++i)
      for (int c = 0; c < 64; ++c) p.q(h, i, c) = 1.0f;
  for (int j = 0; j < 64; ++j)
    for (int c = 0; c < 64; ++c) {
      p.k(0, j, c) = j == 0 ? 11.125f : 0.0f;
      p.v(0, j, c) = j == 0 ? 0.0f : 0x1p100f;
    }
  for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o}) {
    const Recipe r = wgmma_recipe(gpu::QkType::bf16, gpu::PvType::bf16, acc);
    const float want = emulate(p, r).out.data[0];
    INFO("emulator's output " << want);
    REQUIRE(want > 0x1p-24f);  // the construction: subnormal P reach the output
    REQUIRE(want < 0x1p-20f);
    const std::vector<float> got = gpu::flash_wgmma(gpu::make_mma_inputs(p, r), acc);
    test::check_against_emulator(p, r, got, (name(gpu::QkType::bf16, gpu::PvType::bf16, acc) + " subnormal P").c_str());
  }
}

TEST_CASE("wgmma kernel vs emulator on the shipped real dump", "[gpu][wgmma]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    const LayerSlice s = load_layer(info, layer, req);
    for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o})
      check(s.problem, gpu::QkType::int8, gpu::PvType::e4m3, acc, std::string("layer ") + layer);
    check(s.problem, gpu::QkType::fp16, gpu::PvType::fp16, gpu::WgmmaPvAcc::per_tile, std::string("layer ") + layer);
    check(s.problem, gpu::QkType::bf16, gpu::PvType::bf16, gpu::WgmmaPvAcc::per_tile, std::string("layer ") + layer);
    for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o})
      check_128(s.problem, gpu::QkType::int8, acc, std::string("layer ") + layer);
  }
}

TEST_CASE("wgmma kernel: per-tile and into-O accumulation agree bit for bit on one key tile", "[gpu][wgmma]") {
  // With a single 64-key tile, O starts at zero either way: the per-tile sum added into O = 0 is that
  // sum (0 + x is exact), and the chained instructions see the same operands from the same zero.
  Problem p = test::random_problem(4, 2, 60, 128, 17);
  for (gpu::PvType pv : {gpu::PvType::e4m3, gpu::PvType::fp16, gpu::PvType::bf16}) {
    const gpu::MmaInputs in = gpu::make_mma_inputs(p, wgmma_recipe(gpu::QkType::int8, pv, gpu::WgmmaPvAcc::per_tile));
    CHECK(gpu::flash_wgmma(in, gpu::WgmmaPvAcc::per_tile) == gpu::flash_wgmma(in, gpu::WgmmaPvAcc::into_o));
  }
  p = test::random_problem(4, 2, 700, 128, 17);  // and a real causal problem, for the sanitizers
  p.causal = true;
  const gpu::MmaInputs in = gpu::make_mma_inputs(p, wgmma_recipe(gpu::QkType::int8, gpu::PvType::e4m3, gpu::WgmmaPvAcc::per_tile));
  for (float x : gpu::flash_wgmma(in, gpu::WgmmaPvAcc::per_tile)) REQUIRE(std::isfinite(x));
}

TEST_CASE("recipes that name the wgmma presets run on the wgmma family", "[gpu][wgmma]") {
  Problem p = test::random_problem(4, 2, 300, 128, 23);
  p.causal = true;
  for (const char* text : {"q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma",
                           "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile",
                           "q=fp16 k=fp16 acc.qk=h200_hmma p=fp16 v=fp16 acc.pv=h200_hmma_tile",
                           "q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_wgmma_bf16",
                           "q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile",
                           "q=int8/token k=int8/token acc.qk=exact p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile",
                           "q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile",
                           "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma tiles=64x128",
                           "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile128 tiles=64x128",
                           "q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile128 tiles=64x128"}) {
    const Recipe r = recipe_from_string(text);
    INFO(text);
    REQUIRE(gpu::not_covered(p, r).empty());
    const gpu::GpuResult g = gpu::run(p, r);
    CHECK(g.kernel == gpu::kWgmmaKernelName);
    test::check_against_emulator(p, r, g.out.data, text);
  }
}

// Host-side only (no device work): bf16 recipes with the wrong accumulator preset, or paired with
// fp16, are refused by the wgmma family with a message naming what to write instead, and the mma
// family refuses bf16 outright. (gpu::not_covered would accept them all: flash_dot4 runs any
// accumulator model; these recipes then run there, as fp32 FMAs under the model.)
TEST_CASE("bf16 recipes: the matrix families' refusals name the preset to use", "[gpu][wgmma][dispatch]") {
  Problem p = test::random_problem(4, 2, 300, 128, 23);
  const auto wgmma = [&](const char* text) { return gpu::wgmma_not_covered(p, recipe_from_string(text)); };
  const auto mma = [&](const char* text) { return gpu::mma_not_covered(p, recipe_from_string(text)); };
  const char* good = "q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile";
  CHECK(wgmma(good).empty());
  CHECK(wgmma("q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_wgmma_bf16").empty());
  CHECK(wgmma("q=int8/token k=int8/token acc.qk=exact p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile").empty());
  CHECK(wgmma("q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile").empty());
  CHECK(has(mma(good), "the mma kernel takes no bf16 operands (the wgmma kernel pairs bf16 QK^T with bf16 or e4m3 PV"));
  CHECK(has(mma("q=int8/token k=int8/token acc.qk=exact p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile"), "takes no bf16 operands"));
  // The fp16 HMMA preset on bf16 Q K^T, and fp16 P V presets on bf16 P V: the bf16 ones are named.
  CHECK(has(wgmma("q=bf16 k=bf16 acc.qk=h200_hmma p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile"), "qk_acc must be h200_wgmma_bf16"));
  CHECK(has(wgmma("q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_hmma_tile"),
            "pv_acc must be h200_wgmma_bf16 (into O) or h200_wgmma_bf16_tile (per 64-key tile)"));
  // fp16 and bf16 do not mix.
  CHECK(has(wgmma("q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=fp16 v=fp16 acc.pv=h200_hmma_tile"), "pairs bf16 QK^T with bf16 or e4m3 PV"));
  CHECK(has(wgmma("q=fp16 k=fp16 acc.qk=h200_hmma p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile"), "pairs bf16 PV with int8 or bf16 QK^T"));
  CHECK(has(wgmma("q=bf16 k=fp16 acc.qk=h200_wgmma_bf16 p=bf16 v=bf16 acc.pv=h200_wgmma_bf16_tile"), "or both to bf16"));
  // One error for a recipe with two faults: the pairing first (not the fp16 preset, then the pairing).
  CHECK(has(wgmma("q=bf16 k=bf16 acc.qk=h200_wgmma_bf16 p=fp16 v=fp16 acc.pv=h200_wgmma_bf16_tile"), "pairs bf16 QK^T with bf16 or e4m3 PV"));
  // The HMMA model spelled out without factor_emin (recipe text from before the key): the message says what differs.
  CHECK(has(mma("q=fp16 k=fp16 acc.qk=mma(chunk=16,align=26,chunk_bits=23,chunk_round=zero,fused=1) p=fp16 v=fp16 acc.pv=h200_hmma"),
            "differs from it only in factor_emin: the hardware reads a subnormal factor at exponent -14"));
}

TEST_CASE("wgmma kernel vs emulator: 128-key tiles, every QK type with e4m3 PV, both accumulations, ragged N, causal, window, GQA",
          "[gpu][wgmma][tile128]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (gpu::QkType qk : {gpu::QkType::int8, gpu::QkType::fp16, gpu::QkType::bf16})
    for (gpu::WgmmaPvAcc acc : {gpu::WgmmaPvAcc::per_tile, gpu::WgmmaPvAcc::into_o})
      for (int d : {64, 128}) {
        // N = 1000: the last tile holds 104 keys, past the 64 of a 64-key tile's edge.
        Problem p = test::random_problem(4, 2, 1000, d, seed + d);
        for (float& x : p.q.data) x *= 2.0f;
        p.causal = true;
        check_128(p, qk, acc, "d=" + std::to_string(d) + " causal");
        p.causal = false;
        check_128(p, qk, acc, "d=" + std::to_string(d) + " full");
        p.window = 200;
        p.rows = RowSelection::sample_of(300, seed);
        check_128(p, qk, acc, "d=" + std::to_string(d) + " window 200");
      }
}

TEST_CASE("wgmma kernel: 64- and 128-key tiles are different numerics", "[gpu][wgmma][tile128]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  // P is rounded against each tile's running max: 64- and 128-key tiles give other outputs (were the
  // kernel to ignore the recipe's tile, one of them would fail its emulator check on the dump).
  const LayerSlice s = load_layer(info, "0", req);
  const gpu::MmaInputs in64 = gpu::make_mma_inputs(s.problem, wgmma_recipe(gpu::QkType::int8, gpu::PvType::e4m3, gpu::WgmmaPvAcc::into_o));
  const gpu::MmaInputs in128 = gpu::make_mma_inputs(s.problem, wgmma_recipe_128(gpu::QkType::int8, gpu::WgmmaPvAcc::into_o));
  CHECK(gpu::flash_wgmma(in64, gpu::WgmmaPvAcc::into_o) != gpu::flash_wgmma(in128, gpu::WgmmaPvAcc::into_o));
}

// Host-side only: what 128-key tiles the families refuse, each with one message naming the fix.
TEST_CASE("128-key tiles: the matrix families' refusals", "[gpu][wgmma][dispatch]") {
  const Problem p = test::random_problem(4, 2, 300, 128, 23);
  const Problem p256 = test::random_problem(4, 2, 300, 256, 23);
  const char* per_tile = "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=h200_e4m3_wgmma_tile128 tiles=64x128";
  CHECK(gpu::wgmma_not_covered(p, recipe_from_string(per_tile)).empty());
  // The 64-key per-tile preset on 128-key tiles (and the reverse): the flush no longer matches the tile.
  CHECK(has(gpu::wgmma_not_covered(p, recipe_from_string("q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel "
                                                          "acc.pv=h200_e4m3_wgmma_tile tiles=64x128")),
            "h200_e4m3_wgmma_tile128 (tiles.block_k 128)"));
  CHECK(has(gpu::wgmma_not_covered(p, recipe_from_string("q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel "
                                                          "acc.pv=h200_e4m3_wgmma_tile128 tiles=64x64")),
            "h200_e4m3_wgmma_tile (tiles.block_k 64)"));
  CHECK(has(gpu::wgmma_not_covered(p256, recipe_from_string(per_tile)), "128-key tiles at head dims 64 and 128"));
  CHECK(has(gpu::wgmma_not_covered(p, recipe_from_string("q=fp16 k=fp16 acc.qk=h200_hmma p=fp16 v=fp16 acc.pv=h200_hmma_tile tiles=64x128")),
            "128-key tiles with e4m3 P and V only"));
  CHECK(has(gpu::wgmma_not_covered(p, recipe_from_string("q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel "
                                                          "acc.pv=h200_e4m3_wgmma tiles=64x96")),
            "key tile is 64 or 128 (tiles.block_k)"));
  CHECK(has(gpu::mma_not_covered(p, recipe_from_string("q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel "
                                                        "acc.pv=h200_e4m3_mma tiles=64x128")),
            "the mma kernel's key tile is 64 (tiles.block_k)"));
}
