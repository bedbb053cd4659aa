// Tensor quantizers: scale layout per granularity, absmax scales, error bounds, bad specs.
#include <cmath>
#include <random>

#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/formats/registry.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;

namespace {

TensorF random_tensor(int h, int n, int d, std::uint64_t seed) {
  TensorF t(h, n, d);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : t.data) x = normal(gen);
  return t;
}

QuantSpec spec_of(FormatId f, Granularity g, int block = 0) {
  QuantSpec s;
  s.format = f;
  s.granularity = g;
  s.block = block;
  return s;
}

}  // namespace

TEST_CASE("scale counts and groups follow the granularity", "[quantizer]") {
  const int h = 3, n = 10, d = 8;
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::tensor), h, n, d) == 1);
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::head), h, n, d) == 3);
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::token), h, n, d) == 30);
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::block, 4), h, n, d) == 9);  // ceil(10/4) = 3 per head
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::channel), h, n, d) == 24);
  CHECK(scale_count(spec_of(FormatId::int8, Granularity::group, 4), h, n, d) == 60);
}

TEST_CASE("dynamic absmax: each group's largest element maps to max finite", "[quantizer]") {
  const TensorF x = random_tensor(2, 37, 16, 11);
  const Granularity grans[] = {Granularity::tensor, Granularity::head, Granularity::token, Granularity::block,
                               Granularity::channel, Granularity::group};
  for (FormatId fid : {FormatId::int8, FormatId::int4, FormatId::e4m3, FormatId::e4m3fnuz, FormatId::e5m2, FormatId::e2m1}) {
    for (Granularity g : grans) {
      INFO(name_of(fid) << " " << name_of(g));
      const QuantSpec s = spec_of(fid, g, g == Granularity::block ? 8 : (g == Granularity::group ? 4 : 0));
      const QuantizedTensor q = quantize(x, s);
      const Format f = format_of(fid);
      std::vector<float> absmax(q.scales.size(), 0.0f);
      for (int h = 0; h < x.heads; ++h)
        for (int n = 0; n < x.tokens; ++n)
          for (int c = 0; c < x.dim; ++c) {
            float& m = absmax[q.scale_index(h, n, c)];
            m = std::max(m, std::fabs(x(h, n, c)));
          }
      for (std::size_t i = 0; i < q.scales.size(); ++i) {
        REQUIRE(q.scales[i] == static_cast<float>(absmax[i] / max_finite(f)));
      }
      const TensorF y = dequantize(q);
      for (int h = 0; h < x.heads; ++h)
        for (int n = 0; n < x.tokens; ++n)
          for (int c = 0; c < x.dim; ++c) {
            const double s_i = q.scales[q.scale_index(h, n, c)];
            const double v = x(h, n, c), e = std::fabs(y(h, n, c) - v);
            if (f.kind == Kind::integer) {
              // Half a step of the uniform grid, plus fp32 rounding of x/s and of code*s (2^-22 relative).
              REQUIRE(e <= 0.5 * s_i * (1 + 0x1p-20) + std::fabs(v) * 0x1p-22);
            } else {
              // Half an ulp of the element format relative to the value, or half the smallest
              // subnormal step in absolute terms, plus the fp32 roundings.
              const double rel = epsilon(f) / 2 * std::fabs(v), abs = min_subnormal(f) / 2 * s_i;
              REQUIRE(e <= std::max(rel, abs) * (1 + 0x1p-20) + std::fabs(v) * 0x1p-22);
            }
          }
    }
  }
}

TEST_CASE("a static multiplier quantizes P as enc(p * S) / S", "[quantizer]") {
  TensorF p(1, 1, 5);
  p.data = {1.0f, 0.5f, 3.9e-3f, 4.0e-3f, 0.0f};
  QuantSpec s = spec_of(FormatId::int8, Granularity::tensor);
  s.rule = ScaleRule::static_multiplier;
  s.multiplier = 127;
  const QuantizedTensor q = quantize(p, s);
  REQUIRE(q.scales.size() == 1);
  CHECK(q.scales[0] == 1.0f / 127.0f);
  CHECK(decode(format_of(FormatId::int8), q.codes[0]) == 127);
  CHECK(decode(format_of(FormatId::int8), q.codes[1]) == 64);  // 63.5 ties to even
  CHECK(q.codes[2] == 0);  // below 0.5/127 = 3.94e-3: flushed
  CHECK(q.codes[3] == 1);
}

TEST_CASE("scales are rounded to their storage format", "[quantizer]") {
  TensorF x(1, 1, 32);
  for (int c = 0; c < 32; ++c) x.data[c] = 0.1f * static_cast<float>(c + 1);
  QuantSpec s = spec_of(FormatId::int8, Granularity::group, 32);
  s.scale_format = FormatId::fp16;  // llama.cpp q8_0
  QuantizedTensor q = quantize(x, s);
  CHECK(q.scales[0] == static_cast<float>(round_to(format_of(FormatId::fp16), 3.2f / 127.0f)));
  s.scale_format = FormatId::e8m0;  // MX: a power of two
  q = quantize(x, s);
  CHECK(std::exp2(std::round(std::log2(q.scales[0]))) == q.scales[0]);
}

TEST_CASE("an all-zero group gets scale 1 and zero codes", "[quantizer]") {
  const TensorF x(1, 4, 4);
  const QuantizedTensor q = quantize(x, spec_of(FormatId::e4m3, Granularity::token));
  for (float s : q.scales) CHECK(s == 1.0f);
  for (auto c : q.codes) CHECK(c == 0u);
}

TEST_CASE("bad quantizer specs are one clear error each", "[quantizer]") {
  const TensorF x = random_tensor(1, 8, 12, 1);
  CHECK(error_text([&] { (void)quantize(x, spec_of(FormatId::int8, Granularity::group, 32)); })
            .find("group size 32 must divide the head dim 12") != std::string::npos);
  CHECK(error_text([&] { (void)quantize(x, spec_of(FormatId::int8, Granularity::block, 0)); })
            .find("quant spec (int8): block: block granularity needs a positive token count") != std::string::npos);
  QuantSpec s = spec_of(FormatId::int8, Granularity::tensor);
  s.rule = ScaleRule::static_multiplier;
  s.multiplier = -1;
  CHECK(error_text([&] { (void)quantize(x, s); }).find("static multiplier must be positive") != std::string::npos);
  s = spec_of(FormatId::int8, Granularity::tensor);
  s.scale_format = FormatId::int8;
  CHECK(error_text([&] { (void)quantize(x, s); }).find("scale_format: 'int8' is an integer format") != std::string::npos);
  CHECK(error_text([&] { (void)quantize(x, spec_of(FormatId::int8, Granularity::kvhead, 0)); })
            .find("kvhead needs the query heads per KV head (0 given) to divide") != std::string::npos);
  s = spec_of(FormatId::int8, Granularity::thread, 16);
  s.period = 6;
  s.width = 1;
  CHECK(error_text([&] { (void)quantize(x, s); }).find("the period dividing the tile and the width dividing the period; got thread:16:6:1") != std::string::npos);
  CHECK(error_text([] { (void)parse_granularity("row", "recipe field 'k.granularity'"); })
            .find("recipe field 'k.granularity': unknown granularity 'row'") != std::string::npos);
}

TEST_CASE("each scale covers exactly the elements its granularity names", "[quantizer]") {
  // Independent of QuantizedTensor::scale_index: absmax per group computed from the definitions.
  const int H = 4, N = 7, D = 8, T = 3, G = 4, K = 2;  // K: heads per kvhead scale (a GQA group)
  const int TT = 4, P = 2, W = 1;                      // thread: tiles of 4 tokens, classes {0, 2}, {1, 3} (the last tile cut short)
  const TensorF x = random_tensor(H, N, D, 5);
  const auto scale_of = [&](Granularity g, int h, int n, int c) {
    float m = 0;
    for (int hh = 0; hh < H; ++hh)
      for (int nn = 0; nn < N; ++nn)
        for (int cc = 0; cc < D; ++cc) {
          bool same = true;
          switch (g) {
            case Granularity::tensor: break;
            case Granularity::head: same = hh == h; break;
            case Granularity::token: same = hh == h && nn == n; break;
            case Granularity::block: same = hh == h && nn / T == n / T; break;
            case Granularity::channel: same = hh == h && cc == c; break;
            case Granularity::group: same = hh == h && nn == n && cc / G == c / G; break;
            case Granularity::kvhead: same = hh / K == h / K; break;
            case Granularity::thread: same = hh == h && nn / TT == n / TT && (nn % P) / W == (n % P) / W; break;
          }
          if (same) m = std::max(m, std::fabs(x(hh, nn, cc)));
        }
    return static_cast<float>(m / 127.0);
  };
  for (Granularity g : {Granularity::tensor, Granularity::head, Granularity::token, Granularity::block,
                        Granularity::channel, Granularity::group, Granularity::kvhead, Granularity::thread}) {
    INFO(name_of(g));
    QuantSpec spec = spec_of(FormatId::int8, g, g == Granularity::group ? G : g == Granularity::kvhead ? K : g == Granularity::thread ? TT : T);
    spec.period = P;
    spec.width = W;
    const QuantizedTensor q = quantize(x, spec);
    REQUIRE(q.scales.size() == scale_count(spec, H, N, D));
    for (int h = 0; h < H; ++h)
      for (int n = 0; n < N; ++n)
        for (int c = 0; c < D; ++c) REQUIRE(q.scales[q.scale_index(h, n, c)] == scale_of(g, h, n, c));
  }
}

TEST_CASE("eps joins each scale in fp32, and a division's quotient may round half away from zero", "[quantizer]") {
  // SageAttention 2's Triton quantizer: s = absmax / 127 + 1e-7, code = trunc(x / s + copysign(0.5)).
  TensorF x(1, 1, 4);
  x.data = {127.0f, 2.5f, -2.5f, 0.25f};  // absmax 127: s = 1, so the quotients are the values
  QuantSpec s = spec_of(FormatId::int8, Granularity::tensor);
  s.divide = true;
  const auto codes = [&](const QuantSpec& spec) {
    const QuantizedTensor q = quantize(x, spec);
    std::vector<int> c;
    for (std::uint32_t code : q.codes) c.push_back(static_cast<int>(decode(format_of(FormatId::int8), code)));
    return c;
  };
  CHECK(codes(s) == std::vector<int>{127, 2, -2, 0});  // ties to even
  s.half_away = true;
  CHECK(codes(s) == std::vector<int>{127, 3, -3, 0});  // ties away from zero
  s.scale_eps = 0.25;
  CHECK(quantize(x, s).scales[0] == 1.25f);
  CHECK(codes(s) == std::vector<int>{102, 2, -2, 0});  // 127 / 1.25 = 101.6; 2.5 / 1.25 = 2
  s.scale_eps = 1e-7;
  CHECK(quantize(x, s).scales[0] == static_cast<float>(1.0f + 1e-7f));
  s.scale_eps = 2;
  CHECK(error_text([&] { (void)quantize(x, s); }).find("eps 2 added to each scale; expected 0 <= eps < 1") != std::string::npos);
}

TEST_CASE("q4_0's grid: the element of largest magnitude at -8, the others rounded half up", "[quantizer]") {
  // ggml's quantize_row_q4_0_ref: d = m / -8 with m the first element of largest magnitude, signed;
  // code = min(15, trunc(x / d + 8.5)) - 8.
  QuantSpec s = spec_of(FormatId::int4, Granularity::tensor);
  s.signed_max = true;
  const auto run = [&](std::vector<float> values, float scale, std::vector<int> codes) {
    TensorF x(1, 1, static_cast<int>(values.size()));
    x.data = values;
    const QuantizedTensor q = quantize(x, s);
    CHECK(q.scales[0] == scale);
    for (std::size_t i = 0; i < codes.size(); ++i) CHECK(decode(format_of(FormatId::int4), q.codes[i]) == codes[i]);
  };
  run({1.0f, -4.0f, 1.25f, 4.0f}, 0.5f, {2, -8, 3, 7});  // -4 comes first; 2.5 rounds up to 3; 4 / 0.5 = 8 clamps to 7
  run({3.0f, -1.0f, 0.1875f}, -0.375f, {-8, 3, 0});     // a positive max: d < 0; -1 / -0.375 = 2.67 -> 3; 0.1875 -> -0.5 + 8.5 = 8 -> 0
  s.scale_eps = 1e-7;
  TensorF x(1, 1, 2);
  CHECK(error_text([&] { (void)quantize(x, s); }).find("amax:signed (q4_0's grid) needs an integer format with a dynamic scale") != std::string::npos);
}

TEST_CASE("codes:fp32 forms codes from the scale before it is rounded to the stored format", "[quantizer]") {
  // ggml's q8_0 stores d in fp16 but codes x with the fp32 d; the lab's default codes with the stored d.
  const TensorF x = random_tensor(2, 40, 32, 9);
  QuantSpec s = spec_of(FormatId::int8, Granularity::group, 32);
  s.scale_format = FormatId::fp16;
  const QuantizedTensor stored = quantize(x, s);
  s.codes_fp32 = true;
  const QuantizedTensor early = quantize(x, s);
  CHECK(early.scales == stored.scales);  // the same fp16 scales are kept
  int differ = 0;
  for (int h = 0; h < 2; ++h)
    for (int n = 0; n < 40; ++n) {
      float amax = 0;
      for (int c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(x(h, n, c)));
      const float inv = 1.0f / static_cast<float>(amax / 127.0);
      for (int c = 0; c < 32; ++c) {
        const std::size_t i = x.index(h, n, c);
        REQUIRE(decode(format_of(FormatId::int8), early.codes[i]) == std::nearbyint(x(h, n, c) * inv));
        differ += early.codes[i] != stored.codes[i];
      }
    }
  CHECK(differ > 0);  // fp16's 11 bits move some codes (a few percent of them here)
}

TEST_CASE("max:M maps the absmax to M instead of the format's largest", "[quantizer]") {
  // SageAttention 2's fp16-accumulating kernel quantizes V per channel to e4m3 within +-2.25.
  TensorF x(1, 2, 1);
  x.data = {9.0f, -1.0f};
  QuantSpec s = spec_of(FormatId::e4m3, Granularity::head);
  s.scale_max = 2.25;
  const QuantizedTensor q = quantize(x, s);
  CHECK(q.scales[0] == 4.0f);                                       // 9 / 2.25
  CHECK(decode(format_of(FormatId::e4m3), q.codes[0]) == 2.25);     // the absmax at M
  CHECK(decode(format_of(FormatId::e4m3), q.codes[1]) == -0.25);    // -1 / 4 is exact in e4m3
  s.scale_max = 500;
  CHECK(error_text([&] { (void)quantize(x, s); }).find("max 500 (the value the absmax maps to); expected 0.015625 <= max <= 448 (e4m3)") !=
        std::string::npos);
}

TEST_CASE("a knob the spec's other choices would ignore is an error, not a no-op", "[quantizer][errors]") {
  const TensorF x = random_tensor(1, 8, 32, 3);
  const auto why = [&](const QuantSpec& s) { return error_text([&] { (void)quantize(x, s); }); };
  QuantSpec st = spec_of(FormatId::int8, Granularity::tensor);
  st.rule = ScaleRule::static_multiplier;
  st.multiplier = 127;
  for (const auto& [field, set] : {std::pair<std::string, void (*)(QuantSpec&)>{"eps", [](QuantSpec& s) { s.scale_eps = 1e-7; }},
                                   {"max", [](QuantSpec& s) { s.scale_max = 100; }},
                                   {"amax", [](QuantSpec& s) { s.amax_mul = true; }}}) {
    QuantSpec s = st;
    set(s);
    CHECK(why(s).find(field + ": /amax, /max and /eps shape a scale from the absmax; a static scale") != std::string::npos);
  }
  QuantSpec q4 = spec_of(FormatId::int4, Granularity::group, 32);
  q4.signed_max = true;
  q4.scale_max = 4;
  CHECK(why(q4).find("amax: amax:signed (q4_0's grid) needs an integer format with a dynamic scale, without /div, /amax:mul, /round:away, /eps, /max") !=
        std::string::npos);
  q4.scale_max = 0;
  q4.codes_fp32 = true;  // a knob amax:signed would ignore
  CHECK(why(q4).find("/codes:fp32 (it forms its codes from the fp32 scale already)") != std::string::npos);
  q4.codes_fp32 = false;
  q4.scale_format = FormatId::e8m0;  // unsigned: a negative d would be lost
  CHECK(why(q4).find("amax: amax:signed keeps the scale's sign; the scale format e8m0 has none") != std::string::npos);
  QuantSpec c = spec_of(FormatId::int8, Granularity::token);
  c.codes_fp32 = true;
  c.divide = true;
  CHECK(why(c).find("codes: codes:fp32 multiplies by the fp32 scale's reciprocal; /div divides by the stored scale") != std::string::npos);
  QuantSpec nc = spec_of(FormatId::int8, Granularity::token);
  nc.codes_fp32 = true;  // the scale stored in fp32 already: the codes would be the same
  CHECK(why(nc).find("codes: codes:fp32 takes the codes from the fp32 scale before it is rounded to the stored scale format") != std::string::npos);
  nc.scale_format = FormatId::fp16;
  CHECK(why(nc).empty());
  QuantSpec m = spec_of(FormatId::int8, Granularity::token);
  m.scale_max = 0.5;  // int8 codes of a group whose absmax maps to 0.5: all 0 or +-1
  CHECK(why(m).find("max: max 0.5 (the value the absmax maps to); expected 1 <= max <= 127 (int8)") != std::string::npos);
  QuantSpec t = spec_of(FormatId::int8, Granularity::thread, 1 << 20);  // would allocate a scale per class of a 2^20-token tile
  t.period = 1 << 20;
  t.width = 1;
  CHECK(why(t).find("the tile at most 4096 tokens") != std::string::npos);
}

TEST_CASE("a scale without a finite fp32 reciprocal is a numeric failure, never NaN codes", "[quantizer][errors]") {
  // 1e-40 / 127 and 1e-38 / -8 are subnormal in fp32: their reciprocals overflow to inf.
  TensorF x(1, 1, 2);
  x.data = {1e-40f, 0.0f};
  CHECK(error_text([&] { (void)quantize(x, spec_of(FormatId::int8, Granularity::tensor)); })
            .find("is not representable in scale format 'fp32' with a finite fp32 reciprocal") != std::string::npos);
  x.data = {1e-38f, 0.0f};
  QuantSpec q4 = spec_of(FormatId::int4, Granularity::tensor);
  q4.signed_max = true;
  CHECK(error_text([&] { (void)quantize(x, q4); }).find("scale -1.25e-39 (group 0) is not representable") != std::string::npos);
}

TEST_CASE("eps leaves an all-zero group at scale 1", "[quantizer]") {
  // SageAttention 2 adds 1e-7 to each scale; on zero padding that alone would underflow an e4m3
  // scale (smallest 2^-9) to 0. The codes are zero either way.
  TensorF x(1, 2, 4);
  x.data = {0, 0, 0, 0, 1, -2, 3, 0.5f};
  QuantSpec s = spec_of(FormatId::int8, Granularity::token);
  s.scale_format = FormatId::e4m3;
  s.scale_eps = 1e-7;
  const QuantizedTensor q = quantize(x, s);
  CHECK(q.scales[0] == 1.0f);
  CHECK(q.scales[1] == static_cast<float>(round_to(format_of(FormatId::e4m3), static_cast<float>(3.0f / 127 + 1e-7f))));
  for (int c = 0; c < 4; ++c) CHECK(q.codes[c] == 0u);
}
