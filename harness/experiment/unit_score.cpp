#include "harness/experiment/unit_score.hpp"

#include <fmt/core.h>

#include <cmath>

#include "harness/experiment/report_io.hpp"
#include "kernels/formats/numeric_failure.hpp"
#include "reference/statistics.hpp"

namespace qattn {

using nlohmann::json;

UnitScore score_unit(std::span<const double> ref, std::span<const double> x, std::span<const int> head_ids, const ProbRows& p) {
  const std::size_t heads = head_ids.size();
  if (heads == 0 || ref.size() % heads != 0) {
    throw std::invalid_argument("score_unit: " + std::to_string(ref.size()) + " reference values over " + std::to_string(heads) + " heads");
  }
  const std::size_t per_head = ref.size() / heads;
  const std::size_t rows = p.ref ? static_cast<std::size_t>(p.ref->tokens) : 0;
  const int keys = p.ref ? p.ref->dim : 0;
  // Statistics over no sampled rows are not measured (null), never 0.
  const bool divergence = p.candidate && rows > 0, flushed = p.flush_threshold && rows > 0;
  UnitScore u;
  u.heads.reserve(heads);
  for (std::size_t h = 0; h < heads; ++h) {
    HeadScore s;
    try {
      s.error = compare(ref.subspan(h * per_head, per_head), x.subspan(h * per_head, per_head));
    } catch (const NumericFailure& f) {
      throw NumericFailure(fmt::format("head {}: {}", head_ids[h], f.what()));
    }
    if (divergence) s.kl_mean = 0, s.tv_mean = 0;
    if (flushed) s.p_mass_flushed_ref = 0;
    for (std::size_t k = 0; k < rows; ++k) {
      const std::span<const double> pr(p.ref->row(static_cast<int>(h), static_cast<int>(k)), keys);
      if (divergence) {
        const RowDivergence dv =
            row_divergence(pr, std::span<const double>(p.candidate->row(static_cast<int>(h), static_cast<int>(k)), keys), kKlFloor, p.sink_outcome);
        *s.kl_mean += dv.kl / static_cast<double>(rows);
        *s.tv_mean += dv.total_variation / static_cast<double>(rows);
      }
      if (flushed) *s.p_mass_flushed_ref += mass_flushed(pr, *p.flush_threshold) / static_cast<double>(rows);
    }
    u.heads.push_back(s);
  }
  u.pooled.error = compare(ref, x);
  // The pool's row statistics: the mean over heads (each head's the mean over its sampled rows).
  const auto mean_over_heads = [&](std::optional<double> HeadScore::*field) {
    double m = 0;
    for (const HeadScore& s : u.heads) m += *(s.*field) / static_cast<double>(heads);
    return m;
  };
  if (divergence) {
    u.pooled.kl_mean = mean_over_heads(&HeadScore::kl_mean);
    u.pooled.tv_mean = mean_over_heads(&HeadScore::tv_mean);
    if (!std::isfinite(*u.pooled.kl_mean) || !std::isfinite(*u.pooled.tv_mean)) {
      throw NumericFailure("the attention weights give a non-finite KL or total variation");
    }
  }
  if (flushed) u.pooled.p_mass_flushed_ref = mean_over_heads(&HeadScore::p_mass_flushed_ref);
  return u;
}

void put_fields(json& row, const HeadScore& s, Fields f, std::string_view prefix) {
  const std::string pre(prefix);
  for (std::size_t i = 0; i < f.errors; ++i) row[pre + kErrorFields[i].name] = report::num(s.error.*kErrorFields[i].value);
  for (std::size_t i = 0; i < f.rows; ++i) {
    const std::optional<double>& v = s.*kRowFields[i].value;
    row[pre + kRowFields[i].name] = v ? report::num(*v) : json(nullptr);
  }
}

void put_null_fields(json& row, Fields f, std::string_view prefix) {
  const std::string pre(prefix);
  for (std::size_t i = 0; i < f.errors; ++i) row[pre + kErrorFields[i].name] = nullptr;
  for (std::size_t i = 0; i < f.rows; ++i) row[pre + kRowFields[i].name] = nullptr;
}

namespace {
template <class F>
std::string each_field(Fields f, F&& cell) {
  std::string s;
  for (std::size_t i = 0; i < f.errors; ++i) s += (i ? "," : "") + cell(kErrorFields[i].name);
  for (std::size_t i = 0; i < f.rows; ++i) s += (i || f.errors ? "," : "") + cell(kRowFields[i].name);
  return s;
}
}  // namespace

std::string fields_header(Fields f, std::string_view prefix) {
  return each_field(f, [&](const char* name) { return std::string(prefix) + name; });
}

std::string fields_cells(const json& row, Fields f, std::string_view prefix) {
  return each_field(f, [&](const char* name) {
    const json& v = row.at(std::string(prefix) + name);
    return v.is_null() ? std::string() : fmt::format("{}", report::as_double(v));
  });
}

std::string db_text(double x) { return std::isinf(x) ? (x > 0 ? "inf" : "-inf") : fmt::format("{:.2f}", x); }

}  // namespace qattn
