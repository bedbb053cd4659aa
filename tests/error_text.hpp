#pragma once
// The message of the exception a callable throws ("" if it throws none), so tests can check that
// an error names what, where and what was expected, under Catch2 v2 and v3 alike.
#include <exception>
#include <string>

template <typename F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
