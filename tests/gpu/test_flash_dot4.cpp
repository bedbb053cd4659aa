// The generic GPU family (flash_dot4) against the emulator (labelled gpu; run on the H200 machine).
// Random inputs are fresh each run (the seed is printed) and the shipped real dump is used too.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/gpu/dispatch.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/emulator_check.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;

namespace {

// Every QK^T, P and V format class the family takes, host-quantized (no preparation).
const char* const kFormatRecipes[] = {
    "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448",
    "q=int8/token k=int8/token acc.qk=exact p=int8/static:127",
    "q=int4/group:32 k=int4/group:32 acc.qk=exact p=e4m3/static:448 v=e4m3/channel",
    "q=int4/token k=int4/token acc.qk=exact p=e4m3fnuz/static:240",
    "q=int8/block:64 k=int8/head acc.qk=exact p=int8/static:127 v=int8/channel",
    "q=e4m3/token k=e4m3/token p=e4m3/static:448 v=e4m3/channel",
    "q=bf16 k=bf16 p=bf16 v=bf16 acc.qk=exact acc.pv=exact",
    "q=fp16 k=fp16 p=fp16 v=fp16 denominator=float",
    "q=fp32 k=fp32 p=fp32 v=fp32",
    "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 v=e4m3/channel vsmooth=1",
    "q=fp16 k=fp16 p=e4m3/static:448 v=fp16 tau=8",
    "q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448 split=4",
    "q=bf16 k=bf16 p=bf16 v=bf16 vsmooth=1 split=7",
    // Accumulator models on CUDA cores: the "fp22" unit SageAttention2 describes (13 bits), fp16, the
    // H200's fused HMMA chain with a P the mma family does not take.
    "q=e4m3/token k=e4m3/token p=e4m3/static:448 v=e4m3/channel acc.qk=mma(chunk=32,align=26,chunk_bits=23,acc_bits=13) "
    "acc.pv=mma(chunk=32,align=26,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero)",
    "q=fp16 k=fp16 p=fp16 v=fp16 acc.qk=fp16 acc.pv=fp16",
    "q=int8/token k=int8/token acc.qk=exact p=int8/static:127 v=e4m3/channel acc.pv=h200_e4m3_mma",
    "q=fp16 k=fp16 p=bf16 v=fp16 acc.qk=h200_hmma acc.pv=mma(chunk=16,align=26,chunk_bits=23,chunk_round=zero,fused=1,flush=4)",
};

// K smoothing, Q smoothing and rotation: Q and K from the preparation kernels.
const char* const kPreparedRecipes[] = {
    "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=int8/static:127",
    "q=int8/token k=int8/token ksmooth=block acc.qk=exact p=e4m3/static:448",
    "q=int8/token k=int8/token ksmooth=block_corrected ksmooth_block=128 acc.qk=exact p=e4m3/static:448",
    "q=int8/token k=int8/token ksmooth=running acc.qk=exact p=e4m3/static:448 v=int8/channel",
    "q=int8/block:64 k=int8/head rotation=hadamard ksmooth=global acc.qk=exact p=e4m3/static:448",
    "q=int8/token k=int8/token qsmooth=1 acc.qk=exact p=e4m3/static:448",
    "q=int8/token k=int8/token qsmooth=1 ksmooth=global acc.qk=exact p=e4m3/static:448 v=e4m3/channel",
    "q=int8/token k=int8/token qsmooth=1 ksmooth=block_corrected tiles=128x64 acc.qk=exact p=int8/static:127 vsmooth=1",
    "q=fp16 k=fp16 p=fp16 v=fp16 rotation=hadamard ksmooth=global",
    "q=bf16 k=bf16 p=bf16 v=bf16 qsmooth=1 ksmooth=block_corrected split=3 acc.qk=exact",
};

std::vector<float> run_family(const Problem& p, const Recipe& r, const gpu::Dot4Tuning& tuning = {}) {
  INFO(gpu::dot4_not_covered(p, r));
  REQUIRE(gpu::dot4_not_covered(p, r).empty());
  const gpu::Dot4Inputs in = gpu::make_inputs(p, r);
  const bool prepared = r.k_smoothing != KSmoothing::none || r.rotation != Rotation::none || r.q_smoothing;
  return prepared ? gpu::flash_dot4_prepared(p, r, in, tuning) : gpu::flash_dot4(in, tuning);
}

// The family runs the emulator's operations in its order, so every output must be bit-equal. The one
// operation that may differ is exp2_rn (kernels/formats/exp2.hpp): about once in 10^11 calls, and a
// run makes about 10^8.
void check(const Problem& p, const char* recipe, const std::string& what) {
  const Recipe r = recipe_from_string(recipe);
  test::check_against_emulator(p, r, run_family(p, r), (what + " [" + recipe + "]").c_str(), true);
}

// Random Q, K, V with K's channels offset (real keys' outlier channels), so that K smoothing matters.
Problem offset_problem(int hq, int hkv, int n, int d, std::uint64_t seed) {
  Problem p = test::random_problem(hq, hkv, n, d, seed);
  for (float& x : p.q.data) x *= 2.0f;
  for (std::size_t e = 0; e < p.k.data.size(); ++e) p.k.data[e] += 0.5f * static_cast<float>(e % d % 7);
  return p;
}

}  // namespace

TEST_CASE("dot4 kernel: integer logits equal the emulator's bit for bit", "[gpu]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu on %s\n", static_cast<unsigned long long>(seed), gpu::device_name().c_str());
  const Problem p = test::random_problem(4, 2, 300, 64, seed);
  std::vector<int> hs, is, js;
  std::mt19937_64 gen(seed);
  for (int t = 0; t < 2000; ++t) {
    hs.push_back(static_cast<int>(gen() % 4));
    is.push_back(static_cast<int>(gen() % 300));
    js.push_back(static_cast<int>(gen() % 300));
  }
  for (const char* text : {"q=int8/token k=int8/token acc.qk=exact p=e4m3/static:448", "q=int4/group:32 k=int4/group:32 acc.qk=exact"}) {
    INFO(text);
    const Recipe r = recipe_from_string(text);
    const gpu::Dot4Inputs in = gpu::make_inputs(p, r);
    const std::vector<int> got = gpu::dot4_logits(in, hs, is, js);
    REQUIRE(got.size() == hs.size() * in.groups);
    for (int t = 0; t < 2000; ++t) {
      const std::vector<int> want = integer_logits(p, r, hs[t], is[t], js[t]);
      REQUIRE(static_cast<int>(want.size()) == in.groups);
      for (int g = 0; g < in.groups; ++g) REQUIRE(got[static_cast<std::size_t>(t) * in.groups + g] == want[g]);
    }
  }
}

TEST_CASE("dot4 kernel vs emulator: every format class, ragged shapes and masks", "[gpu]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Problem p = offset_problem(4, 2, 1000, 128, seed);  // 1000: not a multiple of the tile
  p.causal = true;
  for (const char* r : kFormatRecipes) check(p, r, "d=128 causal");
  p.causal = false;
  p.window = 200;
  p.rows = RowSelection::sample_of(300, seed);
  for (const char* r : kFormatRecipes) check(p, r, "d=128 window");
  for (int d : {64, 256}) {  // 256: Gemma 3's head dim
    Problem q = offset_problem(4, 1, 700, d, seed + d);
    q.causal = true;
    const std::string dim = "d=" + std::to_string(d) + " causal";
    check(q, kFormatRecipes[0], dim);
    check(q, kFormatRecipes[2], dim);
    check(q, kFormatRecipes[5], dim);
  }
}

TEST_CASE("dot4 kernel vs emulator: smoothing and rotation from the preparation kernels", "[gpu]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Problem p = offset_problem(4, 2, 900, 128, seed);
  p.causal = true;
  for (const char* r : kPreparedRecipes) check(p, r, "d=128 causal");
  p.causal = false;
  p.rows = RowSelection::sample_of(200, seed);
  for (const char* r : kPreparedRecipes) check(p, r, "d=128 full");
}

TEST_CASE("dot4 kernel: a -0 output (alpha = 0 times a negative O) is +0, as the emulator's merge gives", "[gpu]") {
  // Tile 1's scores are 163 log2 units above tile 0's: alpha = 2^-163 = 0 in fp32, O = -32 * 0 = -0,
  // and channel 0 of V is -0 in tile 1, so -0 stays -0 until the merge adds it to +0.
  Problem p = test::random_problem(1, 1, 64, 32, 9);
  for (float& x : p.q.data) x = 10.0f;
  for (int j = 0; j < 64; ++j)
    for (int c = 0; c < 32; ++c) {
      p.k(0, j, c) = j < 32 ? 0.0f : 2.0f;
      if (c == 0) p.v(0, j, c) = j < 32 ? -1.0f : -0.0f;
    }
  check(p, "q=fp32 k=fp32 p=fp32 v=fp32 tiles=64x32", "alpha = 0 after a negative O");
}

TEST_CASE("dot4 kernel vs emulator on the shipped real dump", "[gpu]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    LayerSlice s = load_layer(info, layer, req);
    s.problem.rows = RowSelection::sample_of(256, 1);
    check(s.problem, kFormatRecipes[0], std::string("layer ") + layer);
    check(s.problem, kPreparedRecipes[0], std::string("layer ") + layer);
    check(s.problem, "q=bf16 k=bf16 p=bf16 v=bf16", std::string("layer ") + layer);
  }
}

TEST_CASE("dot4 kernel: the quickstart's recipes the matrix kernels leave are covered", "[gpu]") {
  const Problem p = test::random_problem(2, 1, 64, 64, 3);
  for (const char* text : {"q=fp32 k=fp32 p=fp32 v=fp32", "q=bf16 k=bf16 p=bf16 v=bf16", "q=int8/token k=int8/token ksmooth=global acc.qk=exact",
                           "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=int8/static:127"}) {
    INFO(text);
    CHECK(gpu::not_covered(p, recipe_from_string(text)).empty());
  }
  // Not covered, with the reason: an integer softmax (flash_integer's), too many splits.
  const char* qflash = "q=int8/tensor k=int8/tensor p=int8/static:127 v=int8/tensor softmax=qflash acc.qk=exact acc.pv=exact";
  CHECK(gpu::family_not_covered(GpuFamily::dot4, p, recipe_from_string(qflash)).find("softmax=qflash: not implemented") != std::string::npos);
  CHECK(gpu::dot4_not_covered(p, recipe_from_string("q=int8/token k=int8/token acc.qk=exact split=65")).find("split-K") != std::string::npos);
}

TEST_CASE("dot4 kernel: tuning changes no bit", "[gpu]") {
  Problem p = offset_problem(2, 1, 500, 64, 7);
  p.causal = true;
  gpu::Dot4Tuning one, eight;
  one.rows_per_block = 1;
  eight.rows_per_block = 8;
  for (const char* text : {kFormatRecipes[0], kFormatRecipes[2], kFormatRecipes[6], kFormatRecipes[12], kFormatRecipes[13], kPreparedRecipes[2],
                           kPreparedRecipes[9]}) {
    INFO(text);
    const Recipe r = recipe_from_string(text);
    CHECK(run_family(p, r, one) == run_family(p, r, eight));
  }
}
