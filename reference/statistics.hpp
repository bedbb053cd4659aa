#pragma once
// Statistics that explain a recipe's error, computed from float64 probability rows.
#include <array>
#include <span>

namespace qattn {

// Fraction of a row's probability mass per decade: bin 0 holds p in [1e-1, 1], bin k holds
// [1e-(k+1), 1e-k) for k = 1..7, bin 8 everything positive below 1e-8. Masked keys (p = 0) carry
// no mass and fall in no bin.
inline constexpr int kDecades = 9;
std::array<double, kDecades> mass_per_decade(std::span<const double> p);

// Fraction of the row's mass on keys whose p / max(p) is at most `threshold`: what a P format with
// a static multiplier flushes to zero when P is quantized against the row's final max. (A kernel
// quantizes against the running max of the tiles seen so far; the emulator reports that number.)
// For P quantized as enc(p * S), threshold = flush_threshold(format) / S (int8 at 127: 0.5/127).
double mass_flushed(std::span<const double> p, double threshold);

}  // namespace qattn
