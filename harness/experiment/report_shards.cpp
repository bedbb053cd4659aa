#include "harness/experiment/report_shards.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/experiment/report_io.hpp"

namespace qattn::report {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path shard_dir(const fs::path& report, int rank) { return report / kShardsFolder / ("rank-" + std::to_string(rank)); }

namespace {

std::string key_of(const json& r, bool stats) {
  std::string k = layer_name(r.at("layer")) + "|" + std::to_string(r.at("context").get<long long>());
  return stats ? k : k + "|" + r.at("recipe").get<std::string>();
}

}  // namespace

std::vector<json> complete_units(const std::vector<json>& rows, bool stats) {
  std::map<std::string, std::size_t> count;
  for (const json& r : rows) ++count[key_of(r, stats)];
  std::vector<json> out;
  out.reserve(rows.size());
  for (const json& r : rows) {
    const auto it = r.find("unit_rows");
    if (it == r.end() || (it->is_number_unsigned() && it->get<std::size_t>() == count[key_of(r, stats)])) out.push_back(r);
  }
  return out;
}

std::vector<json> read_units(const fs::path& log, bool stats) { return complete_units(read_log(log), stats); }

namespace {

// One log: returns true when the report's copy was rewritten.
bool merge_one(const fs::path& report, const std::vector<fs::path>& shards, const char* log, bool stats, const RowOrder& order) {
  const std::vector<json> all_own = read_log(report / log);
  const std::vector<json> own = complete_units(all_own, stats);
  std::vector<json> rows = own;
  std::set<std::string> have;
  for (const json& r : own) have.insert(key_of(r, stats));
  for (const fs::path& s : shards) {
    std::set<std::string> here;  // units this shard brings (all of their rows, or none)
    for (const json& r : read_units(s / log, stats)) {
      const std::string k = key_of(r, stats);
      if (have.count(k) && !here.count(k)) continue;
      here.insert(k);
      rows.push_back(r);
    }
    have.insert(here.begin(), here.end());
  }
  std::vector<std::pair<long long, std::size_t>> pos(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) pos[i] = {order(rows[i], stats), i};
  std::stable_sort(pos.begin(), pos.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  bool same = own.size() == all_own.size() && rows.size() == own.size();
  for (std::size_t i = 0; same && i < pos.size(); ++i) same = pos[i].second == i;
  if (same) return false;
  std::string text;
  for (const auto& [p, i] : pos) {
    (void)p;
    text += rows[i].dump() + "\n";
  }
  write_atomic(report / log, text);
  return true;
}

}  // namespace

int merge_logs(const fs::path& report, const RowOrder& order) {
  std::vector<fs::path> shards;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(report / kShardsFolder, ec))
    if (d.is_directory()) shards.push_back(d.path());
  std::sort(shards.begin(), shards.end());
  int files = 0;
  for (const fs::path& s : shards)
    for (const char* log : {kUnitLogs[0], kUnitLogs[1], kUnitLogs[2], kStatsLog}) files += fs::exists(s / log) ? 1 : 0;
  for (const char* log : kUnitLogs) merge_one(report, shards, log, false, order);
  merge_one(report, shards, kStatsLog, true, order);
  fs::remove_all(report / kShardsFolder);
  return files;
}

}  // namespace qattn::report
