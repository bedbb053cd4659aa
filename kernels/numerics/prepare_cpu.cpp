#include "kernels/numerics/prepare_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/formats/codec.hpp"

namespace qattn {

// Orthonormal Hadamard transform of every row (d a power of two), in float64, rounded to fp32.
void hadamard_rows(TensorF& t) {
  const int d = t.dim;
  std::vector<double> x(d);
  const double norm = 1.0 / std::sqrt(static_cast<double>(d));
  for (int h = 0; h < t.heads; ++h)
    for (int n = 0; n < t.tokens; ++n) {
      float* row = t.row(h, n);
      for (int c = 0; c < d; ++c) x[c] = row[c];
      for (int len = 1; len < d; len <<= 1)
        for (int i = 0; i < d; i += len << 1)
          for (int j = i; j < i + len; ++j) {
            const double a = x[j], b = x[j + len];
            x[j] = a + b;
            x[j + len] = a - b;
          }
      for (int c = 0; c < d; ++c) row[c] = static_cast<float>(x[c] * norm);
    }
}

namespace {

// Channel means of blocks of `block` consecutive rows, subtracted (float64 sums in row order, mean
// rounded to fp32, fp32 subtraction); returns them [heads][blocks][dim]. With a 16-bit `format`
// the mean is fp32(sum) * fp32(1/count) rounded to it and K - mean is stored in it, as torch's
// mean and in-place subtraction on an fp16 tensor compute them.
std::vector<float> subtract_block_means(TensorF& t, int block, FormatId format = FormatId::fp32) {
  const int d = t.dim, blocks = (t.tokens + block - 1) / block;
  std::vector<float> means(static_cast<std::size_t>(t.heads) * blocks * d, 0.0f);
  std::vector<double> acc(d);
  for (int h = 0; h < t.heads; ++h)
    for (int b = 0; b < blocks; ++b) {
      const int i0 = b * block, i1 = std::min(t.tokens, i0 + block);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int i = i0; i < i1; ++i)
        for (int c = 0; c < d; ++c) acc[c] += t(h, i, c);
      float* mu = &means[(static_cast<std::size_t>(h) * blocks + b) * d];
      if (format == FormatId::fp32) {
        for (int c = 0; c < d; ++c) mu[c] = static_cast<float>(acc[c] / (i1 - i0));
        for (int i = i0; i < i1; ++i)
          for (int c = 0; c < d; ++c) t(h, i, c) -= mu[c];
      } else {
        const Format f = format_of(format);
        const float inv = 1.0f / static_cast<float>(i1 - i0);
        for (int c = 0; c < d; ++c) mu[c] = static_cast<float>(round_to(f, static_cast<float>(acc[c]) * inv));
        for (int i = i0; i < i1; ++i)
          for (int c = 0; c < d; ++c) t(h, i, c) = static_cast<float>(round_to(f, t(h, i, c) - mu[c]));
      }
    }
  return means;
}

}  // namespace

// Subtracts K's mean as the recipe says; returns the per-block means (for the q.mu correction).
std::vector<float> smooth_k(TensorF& k, const Recipe& r) {
  const int n = k.tokens, d = k.dim;
  std::vector<float> block_means;
  std::vector<double> acc(d);
  switch (r.k_smoothing) {
    case KSmoothing::none: break;
    case KSmoothing::global_mean: subtract_block_means(k, n, r.k_smoothing_format); break;
    case KSmoothing::block_mean:
    case KSmoothing::block_mean_corrected:
      block_means = subtract_block_means(k, r.k_smoothing_block > 0 ? r.k_smoothing_block : r.tiles.block_k, r.k_smoothing_format);
      break;
    case KSmoothing::running_mean:
      // Key j is shifted by the mean of the keys before it (a decode cache's mean lags one token).
      for (int h = 0; h < k.heads; ++h) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < n; ++j) {
          for (int c = 0; c < d; ++c) {
            const double raw = k(h, j, c);
            if (j > 0) k(h, j, c) = static_cast<float>(raw - static_cast<double>(static_cast<float>(acc[c] / j)));
            acc[c] += raw;
          }
        }
      }
      break;
  }
  return block_means;
}

std::vector<float> smooth_q(TensorF& q, int block_q) { return subtract_block_means(q, block_q); }

std::vector<float> smooth_v(TensorF& v) { return subtract_block_means(v, v.tokens); }

}  // namespace qattn
