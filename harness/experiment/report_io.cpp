#include "harness/experiment/report_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include <fmt/core.h>

#include "harness/system/process.hpp"

namespace qattn::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Writes all of `text` to fd and makes it durable; closes fd (also when it throws).
void write_all_durable(int fd, const std::string& text, const fs::path& file) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w <= 0) {
      ::close(fd);
      throw std::runtime_error(file.string() + ": write failed");
    }
    done += static_cast<std::size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void append_durable(const fs::path& file, const std::string& lines) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw std::runtime_error(file.string() + ": cannot open for appending");
  write_all_durable(fd, lines, file);
}

void append_unit(const fs::path& file, std::vector<json> rows) {
  std::string lines;
  for (json& r : rows) {
    r["unit_rows"] = rows.size();
    lines += r.dump() + "\n";
  }
  append_durable(file, lines);
}

void write_atomic(const fs::path& file, const std::string& text) {
  // Written, made durable, then renamed over the old file: a crash leaves the old file or the new
  // one, never a part (a merged log replaces rows only once the new ones are on disk).
  const fs::path tmp = file.string() + ".tmp";
  // A file of that name is ours to replace; a link planted there is removed, never written through.
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp.string() + ": cannot open for writing");
  write_all_durable(fd, text, tmp);
  fs::rename(tmp, file);
}

std::vector<json> read_log(const fs::path& file) {
  std::vector<json> rows;
  if (!fs::exists(file)) return rows;
  std::ifstream in(file);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t end = all.rfind('\n');
  const std::size_t keep = end == std::string::npos ? 0 : end + 1;
  if (keep != all.size()) fs::resize_file(file, keep);
  std::istringstream lines(all.substr(0, keep));
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.empty()) continue;
    json row = json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) {
      throw std::invalid_argument(file.string() + ": line " + std::to_string(number) + ": not a JSON object; expected one report row a line "
                                  "(the log was changed by hand or by another program: use --force to write the report again)");
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::uint64_t fnv1a_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
  }
  return h;
}

std::string git_commit(const std::string& folder) {
  std::string s = process_output({"git", "-C", folder, "rev-parse", "HEAD"}).value_or("");
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

std::string csv_text(const std::string& s) {
  std::string out = "\"";
  if (!s.empty() && std::string_view("=+-@\t\r").find(s[0]) != std::string_view::npos) out += '\'';
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

namespace {

// Line breaks end a table row and a list item: each becomes a space.
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' || c == '\r' ? ' ' : c;
  return out;
}

}  // namespace

std::string md_code(const std::string& s) {
  // A code span ends at a run of backticks as long as its fence: the fence is one longer than
  // the longest run inside. In a table, | splits cells even inside a code span unless escaped.
  std::string body;
  std::size_t run = 0, longest = 0;
  for (char c : one_line(s)) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    body += c == '|' ? std::string("\\|") : std::string(1, c);
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string md_text(const std::string& s) {
  std::string out;
  for (char c : one_line(s)) {
    if (std::string_view("\\`*[]<>|").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

namespace {

struct FigureTools {
  std::string python = QATTN_PYTHON_EXE, run_script = QATTN_PLOT_SCRIPT, score_script = QATTN_SCORE_PLOT_SCRIPT;
};

FigureTools& figure_tools() {
  static FigureTools tools;
  return tools;
}

}  // namespace

void set_figure_tools(const std::string& python, const std::string& scripts_dir) {
  figure_tools() = {python, (fs::path(scripts_dir) / "plot_report.py").string(), (fs::path(scripts_dir) / "plot_score.py").string()};
}

bool render_figures(const std::string& report_dir, ReportKind kind, bool quiet) {
  const FigureTools& t = figure_tools();
  const std::string& script = kind == ReportKind::run ? t.run_script : t.score_script;
  std::vector<std::string> argv{t.python, script, report_dir};
  if (quiet) argv.push_back("--quiet");
  const ProcessStatus s = run_process(argv);
  if (s.ok()) return true;
  fmt::print(stderr, "qattn: warning: figures not rendered ({} {} {}: {}); the figure data is in {}/figures/\n", t.python, script,
             report_dir, s.text(), report_dir);
  return false;
}

void throw_figures_missing(const std::string& report_dir) {
  throw std::runtime_error(report_dir + ": the figures were not drawn (the warning above says why); the report's data is complete, and `qattn plot " +
                           report_dir + "` draws them once that is fixed");
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json num(double x) { return std::isfinite(x) ? json(x) : json(x > 0 ? "inf" : (x < 0 ? "-inf" : "nan")); }
double as_double(const json& v) {
  if (v.is_number()) return v.get<double>();
  // Reports written before non-finite values were kept as strings hold an infinite statistic
  // (K's channel ratio with a zero median) as null: read it back as what it was.
  if (v.is_null()) return INFINITY;
  const std::string s = v.get<std::string>();
  return s == "inf" ? INFINITY : (s == "-inf" ? -INFINITY : NAN);
}

json layer_json(const std::string& name) {
  // At most 9 digits (fits an int everywhere) and no leading zero, so the number prints back as
  // the same name.
  const bool plain = !name.empty() && name.size() <= 9 && (name == "0" || name[0] != '0') &&
                     name.find_first_not_of("0123456789") == std::string::npos;
  if (plain) return std::stoi(name);
  return name;
}

std::string layer_name(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<long long>() >= 0)) return std::to_string(v.get<long long>());
  throw std::invalid_argument("layer: expected a layer name or a non-negative integer, got " + v.dump());
}

}  // namespace qattn::report
