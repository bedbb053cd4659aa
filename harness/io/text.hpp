#pragma once
// Text that came from outside (file contents, paths) before it reaches a JSON report or Python,
// which both take UTF-8 only, and an error message, which must stay readable.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/formats/spelling.hpp"  // did_you_mean

namespace qattn {

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
// strings from a file go into JSON reports and Python, which both refuse anything else.
inline bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (n > 0 && i + static_cast<std::size_t>(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto x = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) return false;
    }
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

// s for a message: valid UTF-8 as is but for control bytes (a NUL would end the message, a line
// break split it), any other byte as \xNN.
inline std::string shown_text(const std::string& s) {
  const bool utf8 = valid_utf8(s);
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 0x20 && c < 0x7F) || (utf8 && c >= 0x80)) out += ch;
    else out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }
  return out;
}

}  // namespace qattn
