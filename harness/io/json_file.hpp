#pragma once
// Reads a JSON file, keeping its key order; one clear error for a missing file or bad JSON.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace qattn {

inline nlohmann::ordered_json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot read the " + what);
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::ordered_json::parse_error& e) {
    throw std::invalid_argument(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace qattn
