// ATen's fexp_u20 (kernels/numerics/aten_math.hpp) against values worked out from ATen's public
// definition by an independent implementation (NumPy, its fused multiply-adds in float64), and
// its error and structure over a sweep of the arguments a softmax gives it.
#include "tests/catch.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/numerics/aten_math.hpp"

using namespace qattn;

TEST_CASE("fexp_u20: hand-worked bits, the clamps, error and resolution", "[numerics][aten]") {
  const struct {
    float x;
    std::uint32_t bits;
  } cases[] = {{0.0f, 0x3f7ffc80}, {-1.0f, 0x3ebc5780}, {-0.5f, 0x3f1b46c0}, {-0.25f, 0x3f475dc0},
               {-3.3f, 0x3d171500}, {-10.0f, 0x383e68c0}, {-87.0f, 0x00b33340}, {1.0f, 0x402df580}};
  for (const auto& c : cases) {
    INFO("x = " << c.x);
    CHECK(std::bit_cast<std::uint32_t>(aten_fexp_u20(c.x)) == c.bits);
  }
  // Below ln(FLT_MIN) = -87.3365 it is 0 (not a subnormal); above ln(FLT_MAX), +inf; -inf gives 0.
  CHECK(aten_fexp_u20(-87.34f) == 0.0f);
  CHECK(aten_fexp_u20(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(aten_fexp_u20(88.8f) == std::numeric_limits<float>::infinity());
  // Over [-30, 0]: within 1.13e-4 of e^x (ATen's algorithm's own error: 1.125e-4 at worst, measured
  // with NumPy on 2e6 points), and its bits are those of an fp32 near 2^23 (127 + s) truncated: the
  // last five are always zero (about 18 significant bits).
  double worst = 0;
  int low_bits_set = 0;
  for (int i = 0; i <= 300000; ++i) {
    const float x = -30.0f * static_cast<float>(i) / 300000.0f;
    const float y = aten_fexp_u20(x);
    worst = std::fmax(worst, std::fabs(y / std::exp(static_cast<double>(x)) - 1.0));
    low_bits_set += (std::bit_cast<std::uint32_t>(y) & 31u) != 0u;
  }
  CHECK(low_bits_set == 0);
  CHECK(worst < 1.13e-4);
  CHECK(worst > 1.0e-4);  // and not a correctly rounded exponential
  CHECK(exp_rn(-1.0f) == static_cast<float>(std::exp(-1.0)));
}
