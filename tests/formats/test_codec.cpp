// The scalar codec on every code point: round trips, ties to even, saturation, NaN, signed zero.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/formats/codec.hpp"
#include "kernels/formats/value_table.hpp"
#include "kernels/formats/registry.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<FormatId> small_formats() {
  std::vector<FormatId> ids;
  for (FormatId id : all_formats())
    if (format_of(id).bits <= 16) ids.push_back(id);
  return ids;
}

struct Point {
  double value;
  std::uint32_t code;
};

// Distinct finite values in ascending order (+0 stands for both zeros).
std::vector<Point> finite_values(const Format& f) {
  std::vector<Point> pts;
  for (std::uint32_t c = 0; c < (1u << f.bits); ++c) {
    const double v = decode(f, c);
    if (std::isfinite(v) && !(v == 0 && std::signbit(v))) pts.push_back({v, c});
  }
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.value < b.value; });
  return pts;
}

Format with_overflow(FormatId id, Overflow o) {
  Format f = format_of(id);
  f.overflow = o;
  return f;
}

}  // namespace

// Compile-time facts: the codec is constexpr, and the presets' constants are the specifications'.
static_assert(encode(format_of(FormatId::e4m3), 448.0) == 0x7E);
static_assert(max_finite(format_of(FormatId::e4m3)) == 448.0);
static_assert(max_finite(format_of(FormatId::e5m2)) == 57344.0);
static_assert(max_finite(format_of(FormatId::e4m3fnuz)) == 240.0);
static_assert(max_finite(format_of(FormatId::e5m2fnuz)) == 57344.0);
static_assert(max_finite(format_of(FormatId::e2m1)) == 6.0);
static_assert(max_finite(format_of(FormatId::e8m0)) == 0x1p127);
static_assert(max_finite(format_of(FormatId::fp16)) == 65504.0);
static_assert(max_finite(format_of(FormatId::bf16)) == 0x1.FEp127);
static_assert(max_finite(format_of(FormatId::fp32)) == 0x1.FFFFFEp127);
static_assert(max_finite(format_of(FormatId::int8)) == 127.0);
static_assert(max_finite(format_of(FormatId::int4)) == 7.0);
static_assert(min_subnormal(format_of(FormatId::e4m3)) == 0x1p-9);
static_assert(min_subnormal(format_of(FormatId::e5m2)) == 0x1p-16);
static_assert(min_subnormal(format_of(FormatId::e4m3fnuz)) == 0x1p-10);
static_assert(min_subnormal(format_of(FormatId::e5m2fnuz)) == 0x1p-17);
static_assert(min_subnormal(format_of(FormatId::e2m1)) == 0.5);
static_assert(min_normal(format_of(FormatId::e4m3)) == 0x1p-6);
static_assert(min_normal(format_of(FormatId::e4m3fnuz)) == 0x1p-7);
static_assert(min_normal(format_of(FormatId::e8m0)) == 0x1p-127);
static_assert(flush_threshold(format_of(FormatId::int8)) == 0.5);
static_assert(flush_threshold(format_of(FormatId::e4m3)) == 0x1p-10);

TEST_CASE("every code point of every format of 16 bits or fewer round-trips", "[formats]") {
  for (FormatId id : small_formats()) {
    const Format f = format_of(id);
    INFO("format " << name_of(id));
    for (std::uint32_t c = 0; c < (1u << f.bits); ++c) {
      INFO("code " << c);
      const double v = decode(f, c);
      if (is_nan_code(f, c)) {
        REQUIRE(std::isnan(v));
        REQUIRE(is_nan_code(f, encode(f, v)));
      } else if (std::isinf(v)) {
        // Saturating conversion (satfinite) takes Inf to max finite of the same sign.
        REQUIRE(decode(f, encode(f, v)) == (v > 0 ? max_finite(f) : -max_finite(f)));
        Format g = f;
        g.overflow = Overflow::to_special;
        REQUIRE(encode(g, v) == c);
      } else {
        REQUIRE(encode(f, v) == c);
      }
    }
  }
}

TEST_CASE("decoded values are strictly increasing in magnitude code", "[formats]") {
  for (FormatId id : small_formats()) {
    const Format f = format_of(id);
    INFO("format " << name_of(id));
    const std::uint32_t top = f.specials == Specials::e8m0 ? 0xFEu : max_finite_magnitude_code(f);
    for (std::uint32_t c = 1; c <= top; ++c) REQUIRE(decode(f, c) > decode(f, c - 1));
    REQUIRE(decode(f, top) == max_finite(f));
  }
}

TEST_CASE("every midpoint between neighbouring values rounds to the even code", "[formats]") {
  for (FormatId id : small_formats()) {
    const Format f = format_of(id);
    INFO("format " << name_of(id));
    const auto pts = finite_values(f);
    REQUIRE(pts.size() > 2);
    for (std::size_t i = 1; i < pts.size(); ++i) {
      const Point lo = pts[i - 1], hi = pts[i];
      const double mid = (lo.value + hi.value) / 2;  // exact: both have few significant bits
      INFO("between " << lo.value << " and " << hi.value);
      const Point even = (lo.code & 1u) == 0 ? lo : hi;
      REQUIRE(decode(f, encode(f, mid)) == even.value);
      REQUIRE(decode(f, encode(f, std::nextafter(mid, -kInf))) == lo.value);
      REQUIRE(decode(f, encode(f, std::nextafter(mid, kInf))) == hi.value);
      if (even.value == 0 && has_negative_zero(f)) REQUIRE(std::signbit(decode(f, encode(f, mid))) == std::signbit(mid));
    }
  }
}

TEST_CASE("fp32 encoding agrees with the host's double-to-float conversion", "[formats]") {
  const Format f = format_of(FormatId::fp32);
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> expo(-160, 127);  // includes fp32 subnormals and underflow
  for (int i = 0; i < 200000; ++i) {
    const double x = (i & 1 ? -1 : 1) * std::ldexp(mant(gen), expo(gen));
    INFO("x = " << x);
    REQUIRE(encode(f, x) == std::bit_cast<std::uint32_t>(static_cast<float>(x)));
  }
}

TEST_CASE("overflow saturates to max finite by default, as cvt.rn.satfinite", "[formats]") {
  for (FormatId id : all_formats()) {
    const Format f = format_of(id);
    INFO("format " << name_of(id));
    const double mx = max_finite(f);
    REQUIRE(decode(f, encode(f, mx * 1.75)) == mx);
    REQUIRE(decode(f, encode(f, kInf)) == mx);
    if (f.specials != Specials::e8m0) {
      // Integer formats keep their whole two's-complement range (-128 for int8); the quantizers
      // are the ones that stay symmetric.
      const double lowest = f.kind == Kind::integer ? -mx - 1 : -mx;
      REQUIRE(decode(f, encode(f, -mx * 1.75)) == lowest);
      REQUIRE(decode(f, encode(f, -kInf)) == lowest);
    }
  }
  // e4m3: 464 is the midpoint between 448 (mantissa 110) and 480 (111, the NaN pattern): the tie
  // goes to the even mantissa, 448; anything above 464 overflows and saturates.
  const Format e4m3 = format_of(FormatId::e4m3);
  REQUIRE(encode(e4m3, 464.0) == 0x7E);
  REQUIRE(encode(e4m3, 465.0) == 0x7E);
  REQUIRE(encode(e4m3, 1e9) == 0x7E);
  REQUIRE(encode(e4m3, -1e9) == 0xFE);
}

TEST_CASE("the to_special overflow policy gives Inf where the format has it, else NaN", "[formats]") {
  const Format fp16 = with_overflow(FormatId::fp16, Overflow::to_special);
  REQUIRE(encode(fp16, 65520.0) == 0x7C00);  // the tie above max finite rounds to even: Inf
  REQUIRE(encode(fp16, 65519.99) == 0x7BFF);
  REQUIRE(encode(fp16, -kInf) == 0xFC00);
  const Format e5m2 = with_overflow(FormatId::e5m2, Overflow::to_special);
  REQUIRE(std::isinf(decode(e5m2, encode(e5m2, 1e6))));
  const Format e4m3 = with_overflow(FormatId::e4m3, Overflow::to_special);
  REQUIRE(encode(e4m3, 464.0) == 0x7E);  // a tie that rounds down to even: not an overflow
  REQUIRE(is_nan_code(e4m3, encode(e4m3, 464.01)));
  const Format fnuz = with_overflow(FormatId::e4m3fnuz, Overflow::to_special);
  REQUIRE(encode(fnuz, 1e4) == 0x80);
  const Format e2m1 = with_overflow(FormatId::e2m1, Overflow::to_special);
  REQUIRE(encode(e2m1, 100.0) == 0x7);  // no special values: still saturates
}

TEST_CASE("NaN encodes to the format's NaN and decodes to NaN", "[formats]") {
  REQUIRE(encode(format_of(FormatId::e4m3), kNaN) == 0x7F);
  REQUIRE(encode(format_of(FormatId::e4m3fnuz), kNaN) == 0x80);
  REQUIRE(encode(format_of(FormatId::e5m2fnuz), kNaN) == 0x80);
  REQUIRE(encode(format_of(FormatId::e8m0), kNaN) == 0xFF);
  REQUIRE(encode(format_of(FormatId::e5m2), kNaN) == 0x7E);
  REQUIRE(encode(format_of(FormatId::fp16), kNaN) == 0x7E00);
  REQUIRE(encode(format_of(FormatId::bf16), kNaN) == 0x7FC0);
  REQUIRE(encode(format_of(FormatId::fp32), kNaN) == 0x7FC00000u);
  REQUIRE(std::isnan(decode(format_of(FormatId::e4m3), 0xFF)));
  REQUIRE(std::isnan(decode(format_of(FormatId::e4m3fnuz), 0x80)));
  REQUIRE(std::isnan(decode(format_of(FormatId::e5m2), 0x7D)));
  REQUIRE(std::isinf(decode(format_of(FormatId::e5m2), 0x7C)));
  REQUIRE(std::isnan(decode(format_of(FormatId::e8m0), 0xFF)));
  // The quantizer passes NaN through rather than clamping it to a number.
  REQUIRE(is_nan_code(format_of(FormatId::e4m3), quantize(format_of(FormatId::e4m3), std::nanf(""), 1.0f)));
}

TEST_CASE("signed zero exists only where the format has it", "[formats]") {
  REQUIRE(encode(format_of(FormatId::e4m3), -0.0) == 0x80);
  REQUIRE(encode(format_of(FormatId::e4m3), -1e-9) == 0x80);  // underflow keeps its sign
  REQUIRE(encode(format_of(FormatId::e4m3fnuz), -0.0) == 0x00);
  REQUIRE(encode(format_of(FormatId::e4m3fnuz), -1e-9) == 0x00);
  REQUIRE(encode(format_of(FormatId::e5m2fnuz), -0.0) == 0x00);
  REQUIRE(encode(format_of(FormatId::e2m1), -0.0) == 0x8);
  REQUIRE(encode(format_of(FormatId::int8), -0.4) == 0x00);
}

TEST_CASE("spot values from the specifications", "[formats]") {
  const Format e2m1 = format_of(FormatId::e2m1);
  const double e2m1_values[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (std::uint32_t c = 0; c < 8; ++c) {
    REQUIRE(decode(e2m1, c) == e2m1_values[c]);
    REQUIRE(decode(e2m1, c | 8u) == -e2m1_values[c]);
  }
  REQUIRE(decode(format_of(FormatId::e8m0), 0x7F) == 1.0);
  REQUIRE(decode(format_of(FormatId::e8m0), 0x00) == 0x1p-127);
  REQUIRE(encode(format_of(FormatId::e8m0), 0.0) == 0xFF);   // no zero
  REQUIRE(encode(format_of(FormatId::e8m0), -2.0) == 0xFF);  // no sign
  REQUIRE(encode(format_of(FormatId::e8m0), 0x1p-140) == 0x00);  // below 2^-127 clamps up
  REQUIRE(decode(format_of(FormatId::fp16), 0x3C00) == 1.0);
  REQUIRE(decode(format_of(FormatId::bf16), 0x3F80) == 1.0);
  REQUIRE(decode(format_of(FormatId::e4m3), 0x01) == 0x1p-9);
  REQUIRE(decode(format_of(FormatId::e5m2fnuz), 0x01) == 0x1p-17);
  REQUIRE(decode(format_of(FormatId::int8), 0x80) == -128.0);
  REQUIRE(decode(format_of(FormatId::int4), 0x8) == -8.0);
  REQUIRE(decode(format_of(FormatId::int4), 0xF) == -1.0);
}

TEST_CASE("the scalar quantizer is symmetric and saturating", "[formats]") {
  const Format int8 = format_of(FormatId::int8);
  REQUIRE(decode(int8, quantize(int8, -1000.0f, 1.0f)) == -127.0);  // not -128: symmetric
  REQUIRE(decode(int8, quantize(int8, 2.5f, 1.0f)) == 2.0);
  REQUIRE(decode(int8, quantize(int8, 3.5f, 1.0f)) == 4.0);
  const Format int4 = format_of(FormatId::int4);
  REQUIRE(decode(int4, quantize(int4, -9.0f, 1.0f)) == -7.0);
  // P with a static multiplier: the flush thresholds of numerics.md.
  REQUIRE(quantize(int8, 0.5f / 127.0f * 0.999f, 127.0f) == 0);
  REQUIRE(quantize(int8, 0.5f / 127.0f * 1.001f, 127.0f) == 1);
  const Format e4m3 = format_of(FormatId::e4m3);
  REQUIRE(quantize(e4m3, 2.17e-6f, 448.0f) == 0);   // below 2^-10 / 448 = 2.18e-6
  REQUIRE(quantize(e4m3, 2.19e-6f, 448.0f) == 1);
  REQUIRE(quantize(e4m3, 1.0f, 448.0f) == 0x7E);
}

TEST_CASE("unknown format names are one clear error", "[formats]") {
  REQUIRE(parse_format("e4m3fnuz") == FormatId::e4m3fnuz);
  const std::string msg = error_text([] { (void)parse_format("fp8", "recipe field 'p.format'"); });
  CHECK(msg.find("recipe field 'p.format'") != std::string::npos);
  CHECK(msg.find("'fp8'") != std::string::npos);
  CHECK(msg.find("e4m3fnuz") != std::string::npos);
}

TEST_CASE("the fast non-negative rounder equals the codec on every midpoint and its neighbours", "[formats]") {
  for (FormatId id : small_formats()) {
    const Format f = format_of(id);
    if (f.specials == Specials::e8m0) continue;  // no zero: P never rounds to e8m0
    INFO("format " << name_of(id));
    const NonNegativeRounder table(f);
    const auto pts = finite_values(f);
    for (std::size_t i = 1; i < pts.size(); ++i) {
      if (pts[i - 1].value < 0) continue;
      const double mid = (pts[i - 1].value + pts[i].value) / 2;
      const float m32 = static_cast<float>(mid);
      REQUIRE(static_cast<double>(m32) == mid);  // every midpoint of a <= 16-bit format is an fp32 value
      for (float y : {static_cast<float>(pts[i - 1].value), m32, std::nextafter(m32, -INFINITY), std::nextafter(m32, INFINITY),
                      static_cast<float>(pts[i].value)}) {
        REQUIRE(static_cast<double>(table.round(y)) == decode(f, encode(f, y)));
      }
    }
    const double mx = max_finite(f);
    REQUIRE(static_cast<double>(table.round(static_cast<float>(mx * 3))) == mx);  // saturates like the codec
    REQUIRE(table.round(0.0f) == 0.0f);
  }
}

TEST_CASE("round_float_to, the epilogues' fp32 -> fp16 / bf16 rounding, equals the codec", "[formats]") {
  for (FormatId id : {FormatId::fp16, FormatId::bf16}) {
    const Format f = format_of(id);
    INFO(name_of(id));
    std::size_t checked = 0, differ = 0;
    const auto check = [&](float x) {
      const float want = static_cast<float>(round_to(f, x)), got = round_float_to(f, x);
      ++checked;
      if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(got)) {
        if (++differ <= 5) UNSCOPED_INFO("x " << x << " (bits " << std::bit_cast<std::uint32_t>(x) << "): codec " << want << ", fast " << got);
      }
    };
    // Every value of the format, the midpoints between neighbours (ties) and one fp32 ulp either
    // side of each: the cases where a rounding rule shows; then zeros, saturation and random bits.
    for (std::uint32_t c = 0; c < (1u << 16); ++c) {
      if (is_nan_code(f, c)) continue;
      const double v = decode(f, c);
      if (std::isinf(v)) continue;
      const double next = decode(f, c + 1 < (1u << 16) ? c + 1 : c);
      for (const double y : {v, std::isfinite(next) && (c & 0x7FFFu) != 0x7FFFu ? (v + next) / 2 : v}) {
        const float x = static_cast<float>(y);
        check(x);
        check(std::nextafter(x, std::numeric_limits<float>::infinity()));
        check(std::nextafter(x, -std::numeric_limits<float>::infinity()));
      }
    }
    for (float x : {0.0f, -0.0f, 1e-45f, -1e-45f, 65504.0f, 65519.0f, 65520.0f, 70000.0f, -1e30f, 3.4e38f, -3.4e38f,
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
      check(x);
    std::mt19937 rng(7);
    for (int i = 0; i < 2000000; ++i) {
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
      if (!std::isnan(x)) check(x);
    }
    CHECK(differ == 0);
    CHECK(checked > 2000000);
  }
  CHECK(round_float_to(format_of(FormatId::fp32), 0.1f) == 0.1f);
}
