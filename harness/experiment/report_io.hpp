#pragma once
// The report folder's file habits, shared by `qattn run` and `qattn score`: durable appends to JSON
// Lines logs, atomic whole-file writes, provenance (git commit, dataset hash, time), and numbers
// that may be infinite written as strings ("inf") so JSON never holds NaN.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qattn::report {

// Appends whole lines and makes them durable before returning: a crash loses at most the unit in
// flight, never one already reported.
void append_durable(const std::filesystem::path& file, const std::string& lines);
// Appends one unit's rows durably, each stamped with "unit_rows" (how many rows the unit wrote to
// this log), so a reader can tell a unit whose rows were cut short by a crash or a full disk, at
// any byte, from a finished one (read_units in report_shards.hpp).
void append_unit(const std::filesystem::path& file, std::vector<nlohmann::json> rows);
// Writes a whole file through a temporary and a rename.
void write_atomic(const std::filesystem::path& file, const std::string& text);
// Complete lines of a JSON Lines log (a torn last line from a crash is dropped and truncated).
std::vector<nlohmann::json> read_log(const std::filesystem::path& file);
std::uint64_t fnv1a_file(const std::string& path);
// The commit of the git checkout holding `folder` (default: the working folder; "unknown" outside one).
std::string git_commit(const std::string& folder = ".");
std::string now_utc();
nlohmann::json num(double x);
double as_double(const nlohmann::json& v);
// A layer as the report stores it: a number where the dump's group name is a plain decimal
// ("15" -> 15, so readers can sort and join on it), else the name as a string ("attn.3", "007").
nlohmann::json layer_json(const std::string& name);
// Text that came from outside (a recipe's, kernel's or layer's name, an error message) as one
// CSV field (RFC 4180: always quoted, quotes doubled; a leading = + - @ tab or CR, which a
// spreadsheet would run as a formula, kept as text by a leading apostrophe).
std::string csv_text(const std::string& s);
// The same as Markdown: a code span that no backtick, | or line break inside can end or split
// (md_code), and plain text with Markdown's active characters escaped (md_text), both one table
// cell or one line.
std::string md_code(const std::string& s);
std::string md_text(const std::string& s);
// Which script draws a report's figures: a sweep's (qattn run: reports/plot_report.py) or a
// score's (qattn score: reports/plot_score.py).
enum class ReportKind { run, score };
// Draws REPORT_DIR/figures/*.png from its figure data (matplotlib, in a child process started from
// an argument vector: the folder's name is never read by a shell). Returns false, with a warning
// on stderr, when the drawing failed (Python or matplotlib missing, interrupted, disk full).
// quiet: the script names no figure on stdout.
bool render_figures(const std::string& report_dir, ReportKind kind, bool quiet = false);
// The interpreter and the folder holding plot_report.py and plot_score.py: the build's unless set
// (an installed Python package sets its own interpreter and the scripts it carries).
void set_figure_tools(const std::string& python, const std::string& scripts_dir);
// The error that `run` and `score` end with when their figures were not drawn: the data is
// complete, the command did not do all it was asked.
[[noreturn]] void throw_figures_missing(const std::string& report_dir);
// The dump's group name back from either form (reports written before numbers were stored hold
// strings); anything else throws.
std::string layer_name(const nlohmann::json& v);

}  // namespace qattn::report
