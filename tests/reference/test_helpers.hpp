#pragma once
// Small problems and an independent naive attention for the reference tests.
#include <cmath>
#include <random>
#include <vector>

#include "kernels/problem/problem.hpp"

namespace qattn::test {

inline TensorF random_tensor(int h, int n, int d, std::uint64_t seed, float sigma = 1.0f) {
  TensorF t(h, n, d);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  for (float& x : t.data) x = normal(gen);
  return t;
}

// Values k/64 with |k| <= 256: sums with small multiples of 1/8 stay exact in fp32.
inline TensorF dyadic_tensor(int h, int n, int d, std::uint64_t seed) {
  TensorF t(h, n, d);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> u(-256, 256);
  for (float& x : t.data) x = static_cast<float>(u(gen)) / 64.0f;
  return t;
}

inline Problem random_problem(int hq, int hkv, int n, int d, std::uint64_t seed) {
  Problem p;
  p.q = random_tensor(hq, n, d, seed);
  p.k = random_tensor(hkv, n, d, seed + 1);
  p.v = random_tensor(hkv, n, d, seed + 2);
  return p;
}

// Two-pass softmax in long double, masks written out independently of Problem::visible; the
// soft-cap on the scaled score and a head's sink logit in the denominator, as the problem defines them.
inline std::vector<long double> naive_attention(const Problem& p, int h, int i) {
  const int n = p.k.tokens, d = p.q.dim, kh = h / (p.q.heads / p.k.heads);
  const long double scale = p.softmax_scale != 0 ? p.softmax_scale : 1.0L / std::sqrt(static_cast<long double>(d));
  std::vector<long double> s(n), out(p.v.dim, 0.0L);
  std::vector<bool> keep(n);
  long double mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    bool ok = true;
    if (p.causal && j > i) ok = false;
    if (p.window > 0 && std::abs(i - j) >= p.window) ok = false;
    if (p.chunk > 0 && i / p.chunk != j / p.chunk) ok = false;
    keep[j] = ok;
    if (!ok) continue;
    long double dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<long double>(p.q(h, i, c)) * p.k(kh, j, c);
    s[j] = dot * scale;
    if (!p.alibi.empty()) s[j] -= p.alibi[h] * std::abs(i - j);
    if (p.softcap > 0) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
    mx = std::max(mx, s[j]);
  }
  long double sum = p.sinks.empty() ? 0.0L : std::exp(static_cast<long double>(p.sinks[h]) - mx);
  for (int j = 0; j < n; ++j)
    if (keep[j]) sum += std::exp(s[j] - mx);
  for (int j = 0; j < n; ++j) {
    if (!keep[j]) continue;
    const long double w = std::exp(s[j] - mx) / sum;
    for (int c = 0; c < p.v.dim; ++c) out[c] += w * p.v(kh, j, c);
  }
  return out;
}

}  // namespace qattn::test
