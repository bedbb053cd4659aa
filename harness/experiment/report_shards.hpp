#pragma once
// A sharded run's logs. Each rank appends its finished units to its own shard folder
// (REPORT/shards/rank-<r>/, the same four logs as the report's); rank 0 folds every shard into the
// report's logs, in the order one process writes them, before the work (what an interrupted run
// left, whatever its number of ranks) and after it.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

namespace qattn::report {

inline constexpr const char* kUnitLogs[] = {"results.jsonl", "not_covered.jsonl", "failed.jsonl"};  // rows keyed by unit
inline constexpr const char* kStatsLog = "stats.jsonl";                                           // rows keyed by (layer, context)
inline constexpr const char* kShardsFolder = "shards";

std::filesystem::path shard_dir(const std::filesystem::path& report, int rank);

// The position of a row's unit (or, for stats, its layer and context) in the single-process order;
// rows of units outside the plan get a large position and keep their order.
using RowOrder = std::function<long long(const nlohmann::json& row, bool stats)>;

// The rows of the units a log holds in full: a unit's rows (keyed by layer, context and, unless
// stats, recipe) count only when there are as many as their "unit_rows" says (rows written before
// that field existed count as whole). A unit cut short is left out, to be run again.
std::vector<nlohmann::json> complete_units(const std::vector<nlohmann::json>& rows, bool stats);
// read_log's complete lines, then complete_units.
std::vector<nlohmann::json> read_units(const std::filesystem::path& log, bool stats);

// Merges REPORT/shards/*/<log> into REPORT/<log> for every log: a unit's rows are taken from the
// first file holding any of them in full (the report's own log, then the shards by name; a unit
// cut short is dropped from every log, to be run again), so a merge that
// was interrupted after writing a log and before removing the shards never doubles a row. Rows are
// stably sorted by `order`; each log is rewritten atomically (only when it changes), then the shards
// folder is removed. Returns the number of shard files merged.
int merge_logs(const std::filesystem::path& report, const RowOrder& order);

}  // namespace qattn::report
