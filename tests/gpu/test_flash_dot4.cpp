// GPU kernels against the emulator (labelled gpu; run on the H200 machine). Random inputs are fresh
// each run (the seed is printed) and the shipped real dump is used too.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "harness/io/dataset_file.hpp"
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

Recipe dot4_recipe(FormatId p_format, double multiplier) {
  Recipe r;
  r.q.unit_scale = r.k.unit_scale = false;
  r.q.spec.format = r.k.spec.format = FormatId::int8;
  r.q.spec.granularity = r.k.spec.granularity = Granularity::token;
  r.p.unit_scale = false;
  r.p.spec.format = p_format;
  r.p.spec.rule = ScaleRule::static_multiplier;
  r.p.spec.multiplier = multiplier;
  r.v.spec.format = FormatId::fp32;
  r.v.unit_scale = true;
  r.qk_acc.kind = Accumulator::Kind::exact;
  r.pv_acc.kind = Accumulator::Kind::fp32;
  r.tiles.block_k = 64;
  return r;
}

gpu::Dot4Inputs inputs(const Problem& p, const Recipe& r) { return gpu::make_inputs(p, r); }

void check_against_emulator(const Problem& p, const Recipe& r, const char* what) {
  test::check_against_emulator(p, r, gpu::flash_dot4(inputs(p, r)), what);
}

}  // namespace

TEST_CASE("dot4 kernel: integer logits equal the emulator's bit for bit", "[gpu]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu on %s\n", static_cast<unsigned long long>(seed), gpu::device_name().c_str());
  Problem p = test::random_problem(4, 2, 300, 64, seed);
  const Recipe r = dot4_recipe(FormatId::e4m3, 448);
  std::vector<int> hs, is, js;
  std::mt19937_64 gen(seed);
  for (int t = 0; t < 2000; ++t) {
    hs.push_back(static_cast<int>(gen() % 4));
    is.push_back(static_cast<int>(gen() % 300));
    js.push_back(static_cast<int>(gen() % 300));
  }
  const std::vector<int> got = gpu::dot4_logits(inputs(p, r), hs, is, js);
  for (int t = 0; t < 2000; ++t) REQUIRE(got[t] == integer_logits(p, r, hs[t], is[t], js[t])[0]);
}

TEST_CASE("dot4 kernel vs emulator on random inputs, ragged shapes, masks and P formats", "[gpu]") {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (int d : {64, 128, 256}) {  // 256: Gemma 3's head dim
    Problem p = test::random_problem(4, 2, 1000, d, seed + d);  // 1000: not a multiple of the tile
    for (float& x : p.q.data) x *= 2.0f;
    p.causal = true;
    const std::string dim = "d=" + std::to_string(d);
    check_against_emulator(p, dot4_recipe(FormatId::e4m3, 448), (dim + " causal e4m3 P").c_str());
    check_against_emulator(p, dot4_recipe(FormatId::int8, 127), (dim + " causal int8 P").c_str());
    p.causal = false;
    p.window = 200;
    p.rows = RowSelection::sample_of(300, seed);
    check_against_emulator(p, dot4_recipe(FormatId::e4m3fnuz, 240), (dim + " window e4m3fnuz P").c_str());
  }
}

TEST_CASE("dot4 kernel vs emulator on the shipped real dump", "[gpu]") {
  const DatasetInfo info = open_dataset(QATTN_SOURCE_DIR "/datasets/smollm2-135m-2k.h5");
  SliceRequest req;
  req.tokens = 2048;
  for (const char* layer : {"0", "15", "29"}) {
    const LayerSlice s = load_layer(info, layer, req);
    check_against_emulator(s.problem, dot4_recipe(FormatId::e4m3, 448), layer);
  }
}

TEST_CASE("dot4 kernel: tuning changes no bit", "[gpu]") {
  Problem p = test::random_problem(2, 1, 500, 64, 7);
  p.causal = true;
  const gpu::Dot4Inputs in = inputs(p, dot4_recipe(FormatId::e4m3, 448));
  gpu::Dot4Tuning one, eight;
  one.rows_per_block = 1;
  eight.rows_per_block = 8;
  CHECK(gpu::flash_dot4(in, one) == gpu::flash_dot4(in, eight));
}
