#pragma once
// The score of one unit (a layer and context of a dump, run by one recipe or kernel): a candidate
// output against a reference output of the same rows, per query head and pooled over the heads.
// The fields a unit reports, their names and their order are defined here once; `qattn eval`,
// `qattn run`, `qattn score` and the Python bindings all write them from these definitions.
#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernels/formats/tensor.hpp"
#include "reference/metrics.hpp"

namespace qattn {

struct HeadScore {
  ErrorMetrics error;                         // against the reference
  std::optional<double> kl_mean, tv_mean;     // over the sampled rows, when the candidate has P rows
  std::optional<double> p_mass_flushed_ref;   // the reference's mass a static P format flushes (mean over rows)
};

struct RowField {
  const char* name;
  std::optional<double> HeadScore::*value;
};
// Every table, JSON row and CSV lists the error fields (kErrorFields, reference/metrics.hpp) in their
// order, then the row fields.
inline constexpr std::array<RowField, 3> kRowFields{{{"kl_mean", &HeadScore::kl_mean},
                                                    {"tv_mean", &HeadScore::tv_mean},
                                                    {"p_mass_flushed_ref", &HeadScore::p_mass_flushed_ref}}};

// A leading part of the fields: the first `errors` error fields, then the first `rows` row fields.
struct Fields {
  std::size_t errors = kErrorFields.size();
  std::size_t rows = kRowFields.size();
};

struct UnitScore {
  std::vector<HeadScore> heads;
  HeadScore pooled;  // every head's output as one vector; the row statistics the mean over heads
};

// What the probability statistics of a unit need. ref: the reference's P rows [H, rows, N];
// candidate: the candidate's own P rows of the same shape, when it has them (KL and TV are then
// measured); flush_threshold: a static P format's p / max(p) at or below which it flushes. With
// no sampled rows (ref absent or empty) these statistics are not measured.
struct ProbRows {
  const TensorD* ref = nullptr;
  const TensorD* candidate = nullptr;
  std::optional<double> flush_threshold;
  bool sink_outcome = false;  // the problem has sink logits: a row's missing mass is its sink's (row_divergence)
};

// ref and x hold [heads, rows, d], one block per head. head_ids name the heads in errors (the
// dump's query heads). Throws NumericFailure "head H: why" when a head has no metrics (a non-finite
// value, an all-zero reference).
UnitScore score_unit(std::span<const double> ref, std::span<const double> x, std::span<const int> head_ids, const ProbRows& p = {});

// The fields of a head (or of the pool) into a JSON row, each key prefixed: an infinite SQNR as
// "inf", a field not measured as null. put_null_fields: the same keys, all null.
void put_fields(nlohmann::json& row, const HeadScore& s, Fields f = {}, std::string_view prefix = "");
void put_null_fields(nlohmann::json& row, Fields f = {}, std::string_view prefix = "");
// The CSV header of the fields ("sqnr_db,rel_l2,..."), and a row's cells as put_fields wrote them
// (a null field an empty cell), both with no leading or trailing comma.
std::string fields_header(Fields f = {}, std::string_view prefix = "");
std::string fields_cells(const nlohmann::json& row, Fields f = {}, std::string_view prefix = "");

// SQNR as a table cell: two decimals, or "inf" / "-inf".
std::string db_text(double x);

}  // namespace qattn
