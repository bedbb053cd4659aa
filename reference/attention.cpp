#include "reference/attention.hpp"

#include "reference/eigen.hpp"
#include "kernels/problem/parallel_tasks.hpp"
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace qattn {

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::vector<Mat> heads_as_double(const TensorF& t) {
  std::vector<Mat> out(t.heads, Mat(t.tokens, t.dim));
  for (int h = 0; h < t.heads; ++h)
    for (int n = 0; n < t.tokens; ++n)
      for (int c = 0; c < t.dim; ++c) out[h](n, c) = t(h, n, c);
  return out;
}

// Keys [lo, hi) that any of the rows in [rmin, rmax] can see: the visible intervals move right
// with the row, so the first row's start and the last row's end bound their union.
std::pair<int, int> key_range(const Problem& p, int rmin, int rmax) {
  return {p.visible_keys(rmin).first, p.visible_keys(rmax).second};
}

// One query block of one head: online softmax over key blocks, result into `out`.
void attend_block(const Problem& p, const Mat& k, const Mat& v, int h, const std::vector<int>& rows,
                  std::size_t r0, std::size_t r1, int block_k, TensorD& out) {
  const int d = p.q.dim;
  const auto br = static_cast<Eigen::Index>(r1 - r0);
  Mat q(br, d);
  for (Eigen::Index r = 0; r < br; ++r)
    for (int c = 0; c < d; ++c) q(r, c) = p.q(h, rows[r0 + r], c);
  const int rmin = rows[r0], rmax = rows[r1 - 1];
  const auto [lo, hi] = key_range(p, rmin, rmax);
  const double scale = p.scale();

  Vec m = Vec::Constant(br, kNegInf), l = Vec::Zero(br);
  Mat o = Mat::Zero(br, p.v.dim), s, prob;  // O has V's head dim
  for (int j0 = lo; j0 < hi; j0 += block_k) {
    const int bc = std::min(block_k, hi - j0);
    s.noalias() = q * k.middleRows(j0, bc).transpose();
    s *= scale;
    if (p.softcap > 0 || !p.alibi.empty()) {
      for (Eigen::Index r = 0; r < br; ++r)
        for (int j = 0; j < bc; ++j) s(r, j) = p.logit(s(r, j), h, rows[r0 + r], j0 + j);
    }
    const int j1 = j0 + bc - 1;
    const bool all_visible = p.visible(rmin, j1) && p.visible(rmax, j0) && p.visible(rmin, j0) && p.visible(rmax, j1);
    if (!all_visible) {
      for (Eigen::Index r = 0; r < br; ++r)
        for (int j = 0; j < bc; ++j)
          if (!p.visible(rows[r0 + r], j0 + j)) s(r, j) = kNegInf;
    }
    const Vec m_new = m.cwiseMax(s.rowwise().maxCoeff());
    // A row that has seen no visible key keeps m = -inf; shifting by 0 instead keeps exp() at 0
    // rather than NaN.
    const Vec shift = m_new.unaryExpr([](double x) { return std::isfinite(x) ? x : 0.0; });
    const Vec alpha = (m - shift).array().exp().matrix();
    prob = (s.colwise() - shift).array().exp().matrix();
    l = alpha.cwiseProduct(l) + prob.rowwise().sum();
    o = alpha.asDiagonal() * o;
    o.noalias() += prob * v.middleRows(j0, bc);
    m = m_new;
  }
  // A sink's weight joins the denominator against the row's final max; it multiplies no value.
  if (!p.sinks.empty()) l += (p.sinks[h] - m.array()).exp().matrix();
  for (Eigen::Index r = 0; r < br; ++r)
    for (int c = 0; c < p.v.dim; ++c) out(h, static_cast<int>(r0 + r), c) = o(r, c) / l(r);
}

// Probability row of query i against every key, two-pass (final max, then normalize).
void probability_row(const Problem& p, const Mat& k, int h, int i, double* dst) {
  const int n = p.k.tokens, d = p.q.dim;
  Vec q(d);
  for (int c = 0; c < d; ++c) q(c) = p.q(h, i, c);
  Vec s = (k * q) * p.scale();
  double mx = kNegInf;
  for (int j = 0; j < n; ++j) {
    s(j) = p.visible(i, j) ? p.logit(s(j), h, i, j) : kNegInf;
    mx = std::max(mx, s(j));
  }
  double sum = p.sinks.empty() ? 0.0 : std::exp(p.sinks[h] - mx);
  for (int j = 0; j < n; ++j) {
    dst[j] = std::exp(s(j) - mx);
    sum += dst[j];
  }
  for (int j = 0; j < n; ++j) dst[j] /= sum;
}

}  // namespace

ReferenceResult reference_attention(const Problem& p, const ReferenceOptions& opt) {
  validate(p);
  if (opt.block_q <= 0 || opt.block_k <= 0) {
    throw std::invalid_argument("reference: block_q and block_k must be positive, got " + std::to_string(opt.block_q) +
                                " and " + std::to_string(opt.block_k));
  }
  for (int i : opt.prob_rows) {
    if (i < 0 || i >= p.q.tokens) {
      throw std::invalid_argument("reference: probability row " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(p.q.tokens) + ")");
    }
  }
  ReferenceResult res;
  res.rows = p.rows.resolve(p.q.tokens);
  res.prob_rows = opt.prob_rows;
  const int hq = p.q.heads, n = p.k.tokens, group = p.group();
  const std::vector<Mat> k = heads_as_double(p.k), v = heads_as_double(p.v);

  res.out = TensorD(hq, static_cast<int>(res.rows.size()), p.v.dim);
  const std::size_t blocks = (res.rows.size() + opt.block_q - 1) / opt.block_q;
  const auto tasks = static_cast<long>(blocks * hq);
  parallel_tasks(tasks, 0, [&](long t) {
    const int h = static_cast<int>(t / static_cast<long>(blocks));
    const std::size_t r0 = (t % blocks) * opt.block_q;
    const std::size_t r1 = std::min(res.rows.size(), r0 + opt.block_q);
    attend_block(p, k[h / group], v[h / group], h, res.rows, r0, r1, opt.block_k, res.out);
  });

  res.probs = TensorD(hq, static_cast<int>(res.prob_rows.size()), n);
  const auto prob_tasks = static_cast<long>(hq * res.prob_rows.size());
  parallel_tasks(prob_tasks, 0, [&](long t) {
    const int h = static_cast<int>(t / static_cast<long>(res.prob_rows.size()));
    const int r = static_cast<int>(t % static_cast<long>(res.prob_rows.size()));
    probability_row(p, k[h / group], h, res.prob_rows[r], res.probs.row(h, r));
  });
  return res;
}

}  // namespace qattn
