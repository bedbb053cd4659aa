#include "kernels/numerics/sfu_math.hpp"

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

extern const unsigned char qattn_ex2_approx_ftz_dev[];
extern const std::size_t qattn_ex2_approx_ftz_dev_size;
extern const unsigned char qattn_rcp_approx_ftz_dev[];
extern const std::size_t qattn_rcp_approx_ftz_dev_size;

namespace qattn {

namespace {

constexpr std::uint32_t kEntries = 1u << 23;

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float float_of(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// A base-binade table: the hardware's result bits for entry i, from the stored deviations.
struct Table {
  std::vector<std::uint32_t> bits;
};

Table inflate(const unsigned char* data, std::size_t size, const char* name, float (*correct)(std::uint32_t)) {
  std::vector<std::int8_t> dev(kEntries);
  uLongf length = kEntries;
  if (uncompress(reinterpret_cast<Bytef*>(dev.data()), &length, data, static_cast<uLong>(size)) != Z_OK || length != kEntries) {
    throw std::runtime_error(std::string("sfu_math: the stored table ") + name + " does not inflate to 2^23 entries");
  }
  Table t;
  t.bits.resize(kEntries);
  for (std::uint32_t i = 0; i < kEntries; ++i) t.bits[i] = static_cast<std::uint32_t>(static_cast<std::int64_t>(bits_of(correct(i))) + dev[i]);
  return t;
}

// The correctly rounded values the deviations are measured from (the probe's host computed them the same way).
float ex2_entry(std::uint32_t i) { return static_cast<float>(std::exp2(static_cast<double>(-2.0f + static_cast<float>(i) * 0x1p-23f))); }
float rcp_entry(std::uint32_t i) { return static_cast<float>(1.0 / static_cast<double>(float_of(0x3f800000u | i))); }

const Table& ex2_table() {
  static std::once_flag once;
  static Table t;
  std::call_once(once, [] { t = inflate(qattn_ex2_approx_ftz_dev, qattn_ex2_approx_ftz_dev_size, "ex2_approx_ftz", ex2_entry); });
  return t;
}

const Table& rcp_table() {
  static std::once_flag once;
  static Table t;
  std::call_once(once, [] { t = inflate(qattn_rcp_approx_ftz_dev, qattn_rcp_approx_ftz_dev_size, "rcp_approx_ftz", rcp_entry); });
  return t;
}

// A double that is exactly a table entry times a power of two, to fp32 with flush to zero.
float flushed(double v) { return std::fabs(v) < 0x1p-126 ? static_cast<float>(std::copysign(0.0, v)) : static_cast<float>(v); }

}  // namespace

float ex2_approx_ftz(float x) {
  if (std::isnan(x)) return x;
  if (x > 0.0f) return std::isinf(x) ? x : static_cast<float>(std::exp2(static_cast<double>(x)));  // not measured bit for bit: see the header
  if (x < -256.0f) return 0.0f;  // -inf included
  const auto fixed = static_cast<std::int64_t>(std::trunc(static_cast<double>(x) * 0x1p23));  // exact: |x| < 2^8
  const std::int64_t n = fixed >> 23;                                                        // floor
  const float entry = float_of(ex2_table().bits[static_cast<std::uint32_t>(fixed & (kEntries - 1))]);
  return flushed(std::ldexp(static_cast<double>(entry), static_cast<int>(n) + 2));
}

float rcp_approx_ftz(float x) {
  if (std::isnan(x)) return x;
  const std::uint32_t b = bits_of(x);
  const int biased = static_cast<int>((b >> 23) & 0xff);
  const bool negative = (b >> 31) != 0;
  if (biased == 0) return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();  // zero, or a flushed subnormal
  if (biased == 0xff) return negative ? -0.0f : 0.0f;  // 1 / inf
  const double r = std::ldexp(static_cast<double>(float_of(rcp_table().bits[b & (kEntries - 1)])), 127 - biased);
  return flushed(negative ? -r : r);
}

}  // namespace qattn
