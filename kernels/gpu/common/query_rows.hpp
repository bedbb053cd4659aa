#pragma once
// What the one-wave-per-query-row families (flash_dot4, flash_integer) share: the keys a query row
// sees (the Problem's masks) and int8 codes packed four to a word for dot4.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/formats/host_device.hpp"

namespace qattn::gpu {

inline constexpr int kMaxChannelsPerLane = 8;  // d <= 8 * wave size: each lane holds d / wave size channels
inline constexpr int kMaxKeysPerLane = 8;      // a key tile <= 8 * wave size: each lane scores tile / wave size keys
inline constexpr int kMaxSharedBytes = 48 * 1024;  // dynamic shared memory a launch gets without an opt-in

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

// The host-side shape rules of these families; each throws std::invalid_argument("<family>: ...").
class RowShapeRules {
 public:
  RowShapeRules(const char* family, int wave_size) : family_(family), ws_(wave_size) {}

  void require(bool ok, const std::string& what) const {
    if (!ok) throw std::invalid_argument(family_ + ": " + what);
  }
  void heads_and_dim(int q_heads, int kv_heads, int tokens, int dim) const {
    require(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0 && tokens > 0,
            "heads must be positive with q_heads a multiple of kv_heads, tokens positive");
    require(dim % 4 == 0 && dim % ws_ == 0 && dim <= kMaxChannelsPerLane * ws_,
            "head dim " + std::to_string(dim) + " must be a multiple of 4 and of the wave size " + std::to_string(ws_) + ", at most " +
                std::to_string(kMaxChannelsPerLane * ws_));
  }
  void key_tile(int block_k) const {
    require(block_k % ws_ == 0 && block_k > 0 && block_k <= kMaxKeysPerLane * ws_,
            "key tile " + std::to_string(block_k) + " must be a multiple of the wave size " + std::to_string(ws_) + ", at most " +
                std::to_string(kMaxKeysPerLane * ws_));
  }
  void rows(const std::vector<int>& rows, int tokens) const {
    for (int row : rows) require(row >= 0 && row < tokens, "row " + std::to_string(row) + " outside [0, tokens)");
  }
  // waves per block, and the shared memory that many waves need.
  void launch(int waves, int shared_bytes) const {
    require(waves >= 1 && waves * ws_ <= 1024, "rows_per_block must be in [1, 1024 / wave size]");
    require(shared_bytes <= kMaxSharedBytes, "rows_per_block " + std::to_string(waves) + " needs " + std::to_string(shared_bytes) +
                                                 " bytes of shared memory, over the 48 KB every GPU gives a launch");
  }

 private:
  std::string family_;
  int ws_;
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
