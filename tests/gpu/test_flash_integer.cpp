// The integer-softmax family (QFlash, I-ViT shiftmax) against the emulator (labelled gpu; run on the
// H200 machine). Every quantity is an integer until one final fp32 multiply, done as the emulator
// does it: the output must equal the emulator's in every bit, not only within the 30-dB criterion.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "kernels/gpu/dispatch.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/emulator_check.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;

namespace {

const char* const kRecipes[] = {
    "q=int8/head k=int8/head v=int8/head p=int8/static:127 softmax=qflash acc.qk=exact acc.pv=exact",
    "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash tiles=64x128 acc.qk=exact acc.pv=exact",
    "q=int8/head k=int8/head v=int8/head p=int8/static:127 softmax=shiftmax acc.qk=exact acc.pv=exact",
};

void check(const Problem& p, const char* text, const std::string& what) {
  const Recipe r = recipe_from_string(text);
  INFO(what << " [" << text << "]");
  REQUIRE(gpu::integer_not_covered(p, r).empty());
  // Integers are exact in any order and the last multiply is the emulator's: bit-equal.
  test::check_against_emulator(p, r, gpu::flash_integer(gpu::make_integer_inputs(p, r)), (what + " [" + text + "]").c_str(), true);
}

}  // namespace

TEST_CASE("integer softmax kernels equal the emulator bit for bit: QFlash and shiftmax, ragged shapes, masks, GQA", "[gpu][integer]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (int d : {64, 128, 256}) {
    Problem p = test::random_problem(4, 2, 1000, d, seed + d);  // 1000: not a multiple of the tile
    for (float& x : p.q.data) x *= 2.0f;
    p.causal = true;
    const std::string dim = "d=" + std::to_string(d);
    for (const char* r : kRecipes) check(p, r, dim + " causal");
    p.causal = false;
    p.window = 200;
    p.rows = RowSelection::sample_of(300, seed);
    for (const char* r : kRecipes) check(p, r, dim + " window");
  }
}

TEST_CASE("integer softmax kernels: QFlash rows whose every P8 flushes (l = 0) give 0, as the emulator", "[gpu][integer]") {
  // Q = +1, K = -1 at d = 256: scores of -256 * 127^2, below QFlash's starting max of -2^21.
  Problem p = test::random_problem(1, 1, 4, 256, 5);
  for (float& x : p.q.data) x = 1.0f;
  for (float& x : p.k.data) x = -1.0f;
  for (float& x : p.v.data) x = 0.5f;
  p.causal = true;
  const Recipe r = recipe_from_string(kRecipes[0]);
  const std::vector<float> got = gpu::flash_integer(gpu::make_integer_inputs(p, r));
  const EmulatorResult emu = emulate(p, r);  // all zeros: compare bits, not SQNR (undefined here)
  REQUIRE(got.size() == emu.out.data.size());
  CHECK(std::memcmp(got.data(), emu.out.data.data(), sizeof(float) * got.size()) == 0);
}

TEST_CASE("integer softmax kernels on the shipped real dump", "[gpu][integer]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    LayerSlice s = load_layer(info, layer, req);
    s.problem.rows = RowSelection::sample_of(256, 1);
    check(s.problem, kRecipes[0], std::string("layer ") + layer);
    check(s.problem, kRecipes[2], std::string("layer ") + layer);
  }
}

TEST_CASE("integer softmax kernels: tuning changes no bit", "[gpu][integer]") {  // and the gpu backend picks them
  Problem p = test::random_problem(2, 1, 500, 64, 11);
  p.causal = true;
  for (const char* text : {kRecipes[0], kRecipes[2]}) {
    INFO(text);
    const Recipe r = recipe_from_string(text);
    CHECK(gpu::run(p, r).kernel == gpu::kIntegerKernelName);
    const gpu::IntegerInputs in = gpu::make_integer_inputs(p, r);
    gpu::IntegerTuning one, eight;
    one.rows_per_block = 1;
    eight.rows_per_block = 8;
    const std::vector<float> a = gpu::flash_integer(in, one), b = gpu::flash_integer(in, eight);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
  }
}

TEST_CASE("integer softmax kernels refuse the rows the emulator refuses: a score unit outside [2^-30, 2^15]", "[gpu][integer]") {
  // Unit-normal Q and K give s_Q, s_K ~ 4/127 (amax over the int8 range): s ~ 1e-3 softmax_scale, so
  // a scale of 1e-9 puts s near 1e-12, below 2^-30 ~ 9.3e-10 (I0 = 1/s leaves int32).
  Problem p = test::random_problem(2, 1, 64, 64, 9);
  p.softmax_scale = 1e-9;
  for (const char* text : {kRecipes[0], kRecipes[2]}) {
    INFO(text);
    const Recipe r = recipe_from_string(text);
    CHECK_THROWS_AS(emulate(p, r), NumericFailure);
    CHECK_THROWS_AS(gpu::make_integer_inputs(p, r), NumericFailure);
  }
}
