#include "kernels/problem/problem.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace qattn {

namespace {

void check_finite(const TensorF& t, const char* name) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t.data[i])) {
      const std::size_t c = i % t.dim, n = (i / t.dim) % t.tokens, h = i / (static_cast<std::size_t>(t.dim) * t.tokens);
      throw std::invalid_argument(std::string("problem: ") + name + "[head " + std::to_string(h) + ", token " +
                                  std::to_string(n) + ", channel " + std::to_string(c) + "] is " +
                                  (std::isnan(t.data[i]) ? "NaN" : "Inf") + "; expected finite values");
    }
  }
}

}  // namespace

std::vector<int> RowSelection::resolve(int tokens) const {
  std::vector<int> rows;
  switch (kind) {
    case Kind::all:
      rows.resize(tokens);
      for (int i = 0; i < tokens; ++i) rows[i] = i;
      return rows;
    case Kind::range:
      if (begin < 0 || end > tokens || begin >= end) {
        throw std::invalid_argument("rows: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    ") is empty or outside [0, " + std::to_string(tokens) + ")");
      }
      for (int i = begin; i < end; ++i) rows.push_back(i);
      return rows;
    case Kind::sample: {
      if (count <= 0 || count > tokens) {
        throw std::invalid_argument("rows: sample of " + std::to_string(count) + " rows from " +
                                    std::to_string(tokens) + " tokens; expected 1.." + std::to_string(tokens));
      }
      // Partial Fisher-Yates over [0, tokens): distinct rows, deterministic for a seed. The array
      // is virtual (position p holds p unless a swap moved another value there), so the memory
      // grows with the rows drawn, not with the tokens.
      std::unordered_map<int, int> moved;
      const auto at = [&](int p) {
        const auto it = moved.find(p);
        return it == moved.end() ? p : it->second;
      };
      rows.reserve(static_cast<std::size_t>(count));
      std::uint64_t state = seed;
      for (int i = 0; i < count; ++i) {
        const auto j = i + static_cast<int>(splitmix64(state) % static_cast<std::uint64_t>(tokens - i));
        const int vi = at(i), vj = at(j);
        moved[j] = vi;
        moved.erase(i);  // position i is never read again
        rows.push_back(vj);
      }
      std::sort(rows.begin(), rows.end());
      return rows;
    }
    case Kind::list:
      if (listed.empty()) throw std::invalid_argument("rows: the list of rows is empty; expected at least one row");
      for (std::size_t i = 0; i < listed.size(); ++i) {
        if (listed[i] < 0 || listed[i] >= tokens) {
          throw std::invalid_argument("rows: listed row " + std::to_string(listed[i]) + " (entry " + std::to_string(i) +
                                      ") is outside [0, " + std::to_string(tokens) + ")");
        }
        if (i > 0 && listed[i] <= listed[i - 1]) {
          throw std::invalid_argument("rows: listed rows must be strictly increasing; entry " + std::to_string(i) + " (" +
                                      std::to_string(listed[i]) + ") follows " + std::to_string(listed[i - 1]));
        }
      }
      return listed;
  }
  return rows;
}

double Problem::scale() const { return softmax_scale != 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(q.dim)); }

void validate(const Problem& p) {
  const auto shape_error = [&](const std::string& what) {
    throw std::invalid_argument("problem: " + what + " (q " + p.q.shape_string() + ", k " + p.k.shape_string() +
                                ", v " + p.v.shape_string() + ")");
  };
  for (const TensorF* t : {&p.q, &p.k, &p.v}) {
    if (t->heads <= 0 || t->tokens <= 0 || t->dim <= 0) shape_error("a tensor has an empty dimension; expected all positive");
    if (t->data.size() != static_cast<std::size_t>(t->heads) * t->tokens * t->dim) shape_error("tensor data size does not match its shape");
  }
  // V's head dim may differ from Q's and K's (DeepSeek's multi-head latent attention: 192 / 128).
  if (p.k.heads != p.v.heads || p.k.tokens != p.v.tokens) shape_error("k and v head or token counts differ; expected equal");
  if (p.q.tokens != p.k.tokens) shape_error("q and k token counts differ; expected equal (queries and keys share positions)");
  if (p.q.dim != p.k.dim) shape_error("q and k head dims differ; expected equal");
  if (p.q.heads % p.k.heads != 0) {
    shape_error("Hq = " + std::to_string(p.q.heads) + " is not a multiple of Hkv = " + std::to_string(p.k.heads));
  }
  if (p.window < 0) throw std::invalid_argument("problem: window=" + std::to_string(p.window) + " is negative; expected 0 (none) or a positive token count");
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale < 0) {
    throw std::invalid_argument("problem: softmax_scale " + std::to_string(p.softmax_scale) + " must be finite and >= 0 (0 = 1/sqrt(d))");
  }
  if (p.chunk < 0) throw std::invalid_argument("problem: chunk=" + std::to_string(p.chunk) + " is negative; expected 0 (none) or a positive token count");
  if (!std::isfinite(p.softcap) || p.softcap < 0) {
    throw std::invalid_argument("problem: softcap " + std::to_string(p.softcap) + " must be finite and >= 0 (0 = none)");
  }
  for (const auto& [values, name] : {std::pair{&p.sinks, "sinks"}, std::pair{&p.alibi, "alibi"}}) {
    if (values->empty()) continue;
    if (values->size() != static_cast<std::size_t>(p.q.heads)) {
      throw std::invalid_argument(std::string("problem: ") + name + " has " + std::to_string(values->size()) +
                                  " values; expected one per query head (" + std::to_string(p.q.heads) + ") or none");
    }
    for (std::size_t h = 0; h < values->size(); ++h) {
      if (!std::isfinite((*values)[h])) throw std::invalid_argument(std::string("problem: ") + name + "[" + std::to_string(h) + "] is not finite; expected a finite value");
    }
  }
  (void)p.rows.resolve(p.q.tokens);
  check_finite(p.q, "q");
  check_finite(p.k, "k");
  check_finite(p.v, "v");
}

}  // namespace qattn
