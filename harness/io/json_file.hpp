#pragma once
// Reads a JSON file, keeping its key order; one clear error for a missing file, bad JSON, or JSON
// nested too deeply to be a configuration (printing or walking a value recurses once per level).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace qattn {

// Experiment, bounds and timing files nest a few levels; 64 leaves room and keeps every recursive
// walk (dump, get, comparison) far from the stack's end.
inline constexpr int kMaxJsonDepth = 64;

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
inline std::string json_error_text(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("[json.exception.", 0) == 0 && s.find("] ") != std::string::npos) s = s.substr(s.find("] ") + 2);
  return s;
}

inline nlohmann::ordered_json read_json_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) throw std::invalid_argument(path + ": is a folder; expected the " + what + " (a JSON file)");
  // A FIFO with no writer would block the open forever; a device or socket is no configuration.
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    const char* kind = fs::is_fifo(st) ? "a FIFO" : fs::is_socket(st) ? "a socket" : fs::is_character_file(st) || fs::is_block_file(st) ? "a device" : "a special file";
    throw std::invalid_argument(path + ": is " + std::string(kind) + "; expected the " + what + " (a regular JSON file)");
  }
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot read the " + what);
  const auto depth_guard = [&](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
    if (depth > kMaxJsonDepth) {
      throw std::invalid_argument(path + ": JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep; expected a " + what +
                                  " of a few levels");
    }
    return true;
  };
  try {
    return nlohmann::ordered_json::parse(in, depth_guard);
  } catch (const nlohmann::ordered_json::exception& e) {  // parse errors, and numbers past a double (1e309)
    throw std::invalid_argument(path + ": not valid JSON: " + json_error_text(e));
  }
}

// A value for an error message: its JSON text, cut to `limit` characters.
template <class Json>
std::string json_brief(const Json& j, std::size_t limit = 80) {
  std::string s = j.dump();
  if (s.size() > limit) s = s.substr(0, limit) + "... (" + std::to_string(s.size()) + " characters)";
  return s;
}

}  // namespace qattn
