#pragma once
// The report of `qattn run` (and `qattn check`'s recomputed experiment) from its unit logs:
// results.csv, summary.md and the figure data (figures/*.csv), then the figures.
#include "harness/experiment/experiment.hpp"
#include "harness/experiment/report_run.hpp"

namespace qattn {

// Reads results.jsonl, stats.jsonl, failed.jsonl and not_covered.jsonl of the report's folder and
// writes the rest. summary: print summary.md and draw the figures (qattn check wants the numbers only).
void write_run_report(const Experiment& e, const report::ReportRun& report, bool summary);

}  // namespace qattn
