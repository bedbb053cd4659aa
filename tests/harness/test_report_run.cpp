// The steps every report-writing command shares: the force/resume mapping, the claim, provenance,
// the refusal to resume a changed report, and the recipe-level aggregate.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "harness/experiment/aggregate.hpp"
#include "harness/experiment/report_run.hpp"
#include "tests/catch.hpp"

using namespace qattn;
using namespace qattn::report;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("existing_for: force replaces, resume completes, neither refuses, both is one error", "[harness][report]") {
  CHECK(existing_for("run", true, false) == Existing::replace);
  CHECK(existing_for("run", false, true) == Existing::resume);
  CHECK(existing_for("run", false, false) == Existing::refuse);
  CHECK(error_of([] { existing_for("fit", true, true); }) == "fit: --resume and --force exclude each other (complete the report, or replace it)");
  CHECK(error_of([] { existing_for("score", true, true, kPythonFlags); }) ==
        "score: resume=True and force=True exclude each other (complete the report, or replace it)");
}

TEST_CASE("ReportRun: provenance in config.json; a resumed report refuses what changed, entry by entry", "[harness][report]") {
  const fs::path dir = fs::temp_directory_path() / ("qattn-report-run-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const json first = {{"seed", 1}, {"rows", 0}, {"recipes", {{"a", "q=int8/token"}, {"b", "q=fp16"}}}};
  {
    const ReportRun r(dir, Existing::refuse, true);
    CHECK_FALSE(r.resuming());
    CHECK(r.previous_config().is_null());  // not resuming: nothing to compare with
    r.write_config(first, "qattn run x.json");
    r.finish("# x\n", {.files = "summary.md", .print = false});
  }
  const json stored = json::parse(std::ifstream(dir / "config.json"));
  for (const char* k : {"git_commit", "build_type", "date", "command_line", "seed", "recipes"}) CHECK(stored.contains(k));
  CHECK(stored["command_line"] == "qattn run x.json");
  CHECK(fs::is_regular_file(dir / "summary.md"));
  // The folder exists: refused without a flag, with the flags the command takes.
  CHECK(error_of([&] { ReportRun(dir, Existing::refuse, true); }) == dir.string() + ": the report folder exists; pass --resume to complete it or --force to replace it");
  CHECK(error_of([&] { ReportRun(dir, Existing::refuse, false, kPythonFlags); }) == dir.string() + ": the report folder exists; pass force=True to replace it");
  {
    const ReportRun r(dir, Existing::resume, true);
    CHECK(r.resuming());
    const std::initializer_list<const char*> keys = {"seed", "rows", "recipes"};
    r.refuse_changed(first, keys, "changed: {}");  // the same experiment resumes
    json more = first;
    more["recipes"]["c"] = "q=bf16";  // a recipe added: the others' rows stay valid
    r.refuse_changed(more, keys, "changed: {}");
    json other = first;
    other["seed"] = 2;
    other["recipes"]["a"] = "q=int8/tensor";
    other["recipes"].erase("b");
    CHECK(error_of([&] { r.refuse_changed(other, keys, "changed: {}"); }) ==
          dir.string() + ": changed: seed, recipes.a (q=int8/token -> q=int8/tensor), recipes.b (removed)");
  }
  std::ofstream(dir / "config.json") << "[1, 2]";
  CHECK(error_of([&] { ReportRun(dir, Existing::resume, true).previous_config(); }).find("not a report's config") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("DbMean: the mean of per-head dB, the worst, and bit-equal heads counted apart", "[harness][report]") {
  DbMean m;
  CHECK(std::isnan(m.mean()));  // nothing added: no number (callers check count())
  for (double db : {30.0, 20.0, static_cast<double>(INFINITY), 40.0}) m.add(db);
  CHECK(m.count() == 4);
  CHECK(std::isinf(m.mean()));  // a bit-equal head makes the mean over every head infinite
  CHECK(m.worst() == 20.0);
  CHECK(m.exact_count() == 1);
  CHECK(m.finite_count() == 3);
  CHECK(m.mean_finite() == 30.0);
  DbMean n;
  n.add(-INFINITY);  // a head with no signal left is not "exact"
  CHECK(n.exact_count() == 0);
  CHECK(n.finite_count() == 1);
}
