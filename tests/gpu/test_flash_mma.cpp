// The mma.sync flash family against the emulator (labelled gpu; run on the H200 machine). Random
// inputs are fresh each run (the seed is printed); the shipped real dump is used too.
#include <cstdio>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/gpu/dispatch.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/emulator_check.hpp"
#include "tests/gpu/matrix_recipes.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;

namespace {

// The H200's mma.sync accumulation: HMMA for fp16, the e4m3 mma.sync's model for e4m3 P V.
Recipe mma_recipe(gpu::QkType qk, gpu::PvType pv) {
  return test::matrix_recipe(qk, pv, h200_hmma_accumulator(),
                             pv == gpu::PvType::e4m3 ? h200_e4m3_mma_accumulator() : h200_hmma_accumulator());
}

const char* name(gpu::QkType qk, gpu::PvType pv) {
  if (qk == gpu::QkType::int8) return pv == gpu::PvType::e4m3 ? "int8 QK + e4m3 PV" : "int8 QK + fp16 PV";
  return pv == gpu::PvType::e4m3 ? "fp16 QK + e4m3 PV" : "fp16 QK + fp16 PV";
}

void check(const Problem& p, const Recipe& r, const std::string& what, const gpu::MmaTuning& tuning = {}) {
  REQUIRE(gpu::mma_not_covered(p, r).empty());
  test::check_against_emulator(p, r, gpu::flash_mma(gpu::make_mma_inputs(p, r), tuning), what.c_str());
}

}  // namespace

TEST_CASE("mma kernel: int8 logits equal the emulator's bit for bit", "[gpu][mma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (int d : {64, 128, 256}) {
    Problem p = test::random_problem(4, 2, 100, d, seed + d);
    for (float& x : p.q.data) x *= 3.0f;
    const Recipe r = mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3);
    const gpu::MmaInputs in = gpu::make_mma_inputs(p, r);
    for (int h = 0; h < 4; ++h) {
      const std::vector<std::int32_t> got = gpu::mma_logits(in, h);
      const std::vector<int> want = integer_logit_block(p, r, h, 16, gpu::kMmaKeyTile);
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < gpu::kMmaKeyTile; ++j) REQUIRE(got[i * gpu::kMmaKeyTile + j] == want[i * gpu::kMmaKeyTile + j]);
    }
  }
}

TEST_CASE("mma kernel vs emulator: every QK/PV pair, head dims, ragged N, causal, window, GQA", "[gpu][mma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (gpu::QkType qk : {gpu::QkType::int8, gpu::QkType::fp16})
    for (gpu::PvType pv : {gpu::PvType::e4m3, gpu::PvType::fp16})
      for (int d : {64, 128, 256}) {
        Problem p = test::random_problem(4, 2, 1000, d, seed + d);  // 1000: not a multiple of the tiles
        for (float& x : p.q.data) x *= 2.0f;
        const Recipe r = mma_recipe(qk, pv);
        const std::string what = std::string(name(qk, pv)) + " d=" + std::to_string(d);
        p.causal = true;
        check(p, r, what + " causal");
        p.causal = false;
        p.window = 200;
        p.rows = RowSelection::sample_of(300, seed);
        check(p, r, what + " window 200, 8 warps", gpu::MmaTuning{8});
      }
}

TEST_CASE("mma kernel vs emulator: e4m3 V without scales, where the emulator's model is the kernel's", "[gpu][mma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Problem p = test::random_problem(4, 2, 1000, 128, seed);
  p.causal = true;
  Recipe r = mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3);
  r.v.unit_scale = true;  // V rounded to e4m3: the kernel multiplies the very values the emulator does
  check(p, r, "int8 QK + e4m3 PV, V rounded to e4m3, d=128 causal");
  r.denominator = Denominator::float_p;
  check(p, r, "the same, denominator from P before rounding");
}

TEST_CASE("mma kernel vs emulator: e4m3 and e5m2 Q and K rounded, through the fp16 HMMA", "[gpu][mma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Problem p = test::random_problem(4, 2, 1000, 128, seed);
  for (float& x : p.q.data) x *= 2.0f;
  p.causal = true;
  for (FormatId f : {FormatId::e4m3, FormatId::e5m2}) {
    Recipe r = mma_recipe(gpu::QkType::fp16, gpu::PvType::e4m3);
    r.q.spec.format = r.k.spec.format = f;  // every value exact in fp16: the HMMA multiplies them unchanged
    r.v.unit_scale = true;                  // an all-fp8 recipe without scales
    const gpu::GpuResult g = gpu::run(p, r);
    CHECK(g.kernel == gpu::kMmaKernelName);
    test::check_against_emulator(p, r, g.out.data, (std::string(name_of(f)) + " Q/K rounded + e4m3 PV, d=128 causal").c_str());
  }
}

TEST_CASE("mma kernel fed by the preparation kernels: K means and Hadamard rotation on the GPU", "[gpu][mma]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Problem p = test::random_problem(4, 2, 1000, 128, seed);
  for (float& x : p.k.data) x += 3.0f;  // a common K offset, as real keys have: what K smoothing removes
  p.causal = true;
  Recipe r = mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3);
  for (KSmoothing ks : {KSmoothing::global_mean, KSmoothing::block_mean, KSmoothing::running_mean}) {
    r.k_smoothing = ks;
    REQUIRE(gpu::mma_not_covered(p, r).empty());
    const gpu::GpuResult g = gpu::run(p, r);
    CHECK(g.kernel == gpu::kMmaKernelName);
    test::check_against_emulator(p, r, g.out.data, ("prepared K smoothing " + std::to_string(static_cast<int>(ks))).c_str());
  }
  r.k_smoothing = KSmoothing::global_mean;
  r.rotation = Rotation::hadamard;
  test::check_against_emulator(p, r, gpu::flash_mma_prepared(p, r), "prepared Hadamard + K mean");
  r.k_smoothing = KSmoothing::block_mean_corrected;
  CHECK_FALSE(gpu::mma_not_covered(p, r).empty());  // the q . mean correction is not on the GPU
}

TEST_CASE("mma kernel vs emulator on the shipped real dump", "[gpu][mma]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    const LayerSlice s = load_layer(info, layer, req);
    check(s.problem, mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3), std::string("layer ") + layer + " int8 QK + e4m3 PV");
    check(s.problem, mma_recipe(gpu::QkType::fp16, gpu::PvType::fp16), std::string("layer ") + layer + " fp16");
  }
}

TEST_CASE("mma kernel: tuning changes no bit", "[gpu][mma]") {
  Problem p = test::random_problem(4, 1, 700, 128, 11);
  p.causal = true;
  for (gpu::PvType pv : {gpu::PvType::e4m3, gpu::PvType::fp16}) {
    const gpu::MmaInputs in = gpu::make_mma_inputs(p, mma_recipe(gpu::QkType::int8, pv));
    CHECK(gpu::flash_mma(in, gpu::MmaTuning{4}) == gpu::flash_mma(in, gpu::MmaTuning{8}));
  }
}

TEST_CASE("gpu backend: the mma family runs its recipes, dot4 the rest, with the kernel named", "[gpu][mma]") {
  Problem p = test::random_problem(2, 1, 200, 64, 3);
  const gpu::GpuResult mma = gpu::run(p, mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3));
  CHECK(mma.kernel == gpu::kMmaKernelName);
  Recipe fp32_pv = mma_recipe(gpu::QkType::int8, gpu::PvType::e4m3);
  fp32_pv.v.unit_scale = true;
  fp32_pv.v.spec.format = FormatId::fp32;
  fp32_pv.pv_acc = Accumulator{};
  CHECK_FALSE(gpu::mma_not_covered(p, fp32_pv).empty());
  CHECK(gpu::run(p, fp32_pv).kernel == gpu::kDot4KernelName);
}
