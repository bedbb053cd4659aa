// Merging a sharded run's logs: every unit once, in the single-process order, whatever the shards
// hold (a merge interrupted after writing the report's log and before removing the shards).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "harness/experiment/report_io.hpp"
#include "harness/experiment/report_shards.hpp"
#include "tests/catch.hpp"

using namespace qattn;
namespace fs = std::filesystem;

namespace {

// A row as the runner writes it (nlohmann::json: keys in sorted order).
std::string row(int layer, int context, const char* recipe, int head) {
  return nlohmann::json{{"layer", layer}, {"context", context}, {"recipe", recipe}, {"head", head}}.dump() + "\n";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("merge_logs: each unit's rows once, from the first file holding them, in plan order", "[harness][shards]") {
  const fs::path dir = fs::temp_directory_path() / ("qattn-shards-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(report::shard_dir(dir, 0));
  fs::create_directories(report::shard_dir(dir, 1));
  // The report holds unit (0, 64, b); shard 1 holds it again (an interrupted merge) and (0, 32, a);
  // shard 0 holds (1, 32, a). Plan order: layer, context, recipe.
  std::ofstream(dir / "results.jsonl") << row(0, 64, "b", 0) << row(0, 64, "b", 1);
  std::ofstream(report::shard_dir(dir, 1) / "results.jsonl") << row(0, 32, "a", 0) << row(0, 32, "a", 1) << row(0, 64, "b", 0)
                                                              << row(0, 64, "b", 1);
  std::ofstream(report::shard_dir(dir, 0) / "results.jsonl") << row(1, 32, "a", 0) << row(1, 32, "a", 1);
  const report::RowOrder order = [](const nlohmann::json& r, bool) {
    return r["layer"].get<long long>() * 1000 + r["context"].get<long long>() * 10 + (r["recipe"] == "b" ? 1 : 0);
  };
  CHECK(report::merge_logs(dir, order) == 2);
  CHECK(slurp(dir / "results.jsonl") ==
        row(0, 32, "a", 0) + row(0, 32, "a", 1) + row(0, 64, "b", 0) + row(0, 64, "b", 1) + row(1, 32, "a", 0) + row(1, 32, "a", 1));
  CHECK_FALSE(fs::exists(dir / report::kShardsFolder));
  // A second merge with nothing to add leaves the log as it is.
  CHECK(report::merge_logs(dir, order) == 0);
  CHECK(slurp(dir / "results.jsonl").size() == 6 * row(0, 32, "a", 0).size());
  fs::remove_all(dir);
}
