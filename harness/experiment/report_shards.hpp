#pragma once
// A sharded run's logs. Each rank appends its finished units to its own shard folder
// (REPORT/shards/rank-<r>/, the same four logs as the report's); rank 0 folds every shard into the
// report's logs, in the order one process writes them, before the work (what an interrupted run
// left, whatever its number of ranks) and after it.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

namespace qattn::report {

inline constexpr const char* kUnitLogs[] = {"results.jsonl", "not_covered.jsonl", "failed.jsonl"};  // rows keyed by unit
inline constexpr const char* kStatsLog = "stats.jsonl";                                           // rows keyed by (layer, context)
inline constexpr const char* kShardsFolder = "shards";

std::filesystem::path shard_dir(const std::filesystem::path& report, int rank);

// The position of a row's unit (or, for stats, its layer and context) in the single-process order;
// rows of units outside the plan get a large position and keep their order.
using RowOrder = std::function<long long(const nlohmann::json& row, bool stats)>;

// Merges REPORT/shards/*/<log> into REPORT/<log> for every log: a unit's rows are taken from the
// first file holding any of them (the report's own log, then the shards by name), so a merge that
// was interrupted after writing a log and before removing the shards never doubles a row. Rows are
// stably sorted by `order`; each log is rewritten atomically (only when it changes), then the shards
// folder is removed. Returns the number of shard files merged.
int merge_logs(const std::filesystem::path& report, const RowOrder& order);

}  // namespace qattn::report
