#pragma once
// What the one-wave-per-query-row families (flash_dot4, flash_integer) share: the keys a query row
// sees (the Problem's masks) and int8 codes packed four to a word for dot4.
#include <cstdint>
#include <vector>

#include "kernels/formats/host_device.hpp"

namespace qattn::gpu {

struct RowMask {
  int n = 0;  // keys
  bool causal = false;
  int window = 0;  // 0: none; else |i - j| < window

  QATTN_HD bool visible(int i, int j) const {
    if (causal && j > i) return false;
    if (window > 0 && (i - j >= window || j - i >= window)) return false;
    return true;
  }
  // [lo, hi): the interval holding every key query i sees.
  QATTN_HD void keys(int i, int& lo, int& hi) const {
    lo = 0;
    hi = causal ? i + 1 : n;
    if (window > 0) {
      lo = i - window + 1 > 0 ? i - window + 1 : 0;
      if (!causal) hi = i + window < n ? i + window : n;
    }
  }
};

// Codes [.., d] (d % 4 == 0) as int32 words, channel 4w + b in byte b (little endian): the byte
// order of the codes themselves, which dot4 reads four at a time.
inline std::vector<int> pack_int8_words(const std::vector<std::int8_t>& codes) {
  std::vector<int> words(codes.size() / 4);
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint32_t x = 0;
    for (int k = 0; k < 4; ++k) x |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(codes[4 * w + k])) << (8 * k);
    words[w] = static_cast<int>(x);
  }
  return words;
}

}  // namespace qattn::gpu
