#pragma once
// The GPU tests' one criterion: a kernel's output against the emulator's, on the same problem and
// recipe, with every element written (outputs are poisoned with NaN before each launch).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/emulate/emulator.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"
#include "tests/catch.hpp"

namespace qattn::test {

// bit_equal: also require every output's bits to be the emulator's (families that run the emulator's
// operations in its order).
inline void check_against_emulator(const Problem& p, const Recipe& r, const std::vector<float>& got, const char* what, bool bit_equal = false) {
  const ReferenceResult ref = reference_attention(p);
  const EmulatorResult emu = emulate(p, r);
  std::size_t unwritten = 0;
  for (float x : got) unwritten += std::isfinite(x) ? 0 : 1;
  INFO(what);
  REQUIRE(got.size() == emu.out.data.size());
  REQUIRE(unwritten == 0);
  const std::vector<double> e(emu.out.data.begin(), emu.out.data.end()), g(got.begin(), got.end());
  const double format_db = compare(ref.out.data, e).sqnr_db, kernel_db = compare(e, g).sqnr_db;
  std::size_t equal = 0;
  for (std::size_t i = 0; i < got.size(); ++i) equal += std::memcmp(&got[i], &emu.out.data[i], sizeof(float)) == 0 ? 1 : 0;
  std::printf("%s: recipe vs float64 %.2f dB, kernel vs emulator %.2f dB, bit-equal %zu/%zu\n", what, format_db, kernel_db, equal,
              got.size());
  // Kernel error well under format error: at least 30 dB below it (the criterion).
  CHECK(kernel_db > format_db + 30);
  if (bit_equal) CHECK(equal == got.size());
}

}  // namespace qattn::test
