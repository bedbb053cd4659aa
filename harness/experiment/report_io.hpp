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
// Writes a whole file through a temporary and a rename.
void write_atomic(const std::filesystem::path& file, const std::string& text);
// Complete lines of a JSON Lines log (a torn last line from a crash is dropped and truncated).
std::vector<nlohmann::json> read_log(const std::filesystem::path& file);
std::uint64_t fnv1a_file(const std::string& path);
std::string git_commit();
std::string now_utc();
nlohmann::json num(double x);
double as_double(const nlohmann::json& v);
// A layer as the report stores it: a number where the dump's group name is a plain decimal
// ("15" -> 15, so readers can sort and join on it), else the name as a string ("attn.3", "007").
nlohmann::json layer_json(const std::string& name);
// The dump's group name back from either form (reports written before numbers were stored hold
// strings); anything else throws.
std::string layer_name(const nlohmann::json& v);

}  // namespace qattn::report
