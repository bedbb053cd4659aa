// NVIDIA only (with the families it feeds): the matrix families' host-side layouts
// (common/matrix_host.hpp).
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/formats/codec.hpp"
#include "kernels/gpu/common/matrix_host.hpp"
#include "kernels/gpu/common/platform.hpp"

namespace qattn::gpu {

namespace {
std::uint16_t fp16_bits(float x) { return static_cast<std::uint16_t>(encode(format_of(FormatId::fp16), x)); }
std::uint16_t bf16_bits(float x) { return static_cast<std::uint16_t>(encode(format_of(FormatId::bf16), x)); }
}  // namespace

int mma_padded_tokens(int n) { return (n + kMatrixKeyPad - 1) / kMatrixKeyPad * kMatrixKeyPad; }

void check_mma_shape(const MmaInputs& in, const char* family) {
  if (in.q_heads <= 0 || in.kv_heads <= 0 || in.q_heads % in.kv_heads != 0 || in.tokens <= 0)
    throw std::invalid_argument(std::string(family) + ": heads must be positive with q_heads a multiple of kv_heads, tokens positive");
}

std::vector<std::uint8_t> mma_qk_rows(const MmaInputs& in, bool is_q, int rows_out) {
  const std::size_t heads = is_q ? in.q_heads : in.kv_heads, d = in.dim, n = in.tokens;
  const std::size_t bytes = qk_element_bytes(in.qk);
  std::vector<std::uint8_t> buf(heads * rows_out * d * bytes, 0);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        const std::size_t src = (h * n + i) * d + c, dst = (h * rows_out + i) * d + c;
        if (in.qk == QkType::int8) {
          buf[dst] = static_cast<std::uint8_t>((is_q ? in.q_codes : in.k_codes)[src]);
        } else {
          const float x = (is_q ? in.q_values : in.k_values)[src];
          const std::uint16_t b = in.qk == QkType::bf16 ? bf16_bits(x) : fp16_bits(x);
          std::memcpy(&buf[2 * dst], &b, 2);
        }
      }
  return buf;
}

std::vector<std::uint8_t> permute_key_rows(const std::vector<std::uint8_t>& rows, int row_bytes, KeyAtRow key_at_row) {
  const std::size_t tile_bytes = static_cast<std::size_t>(kMmaKeyTile) * row_bytes;
  if (rows.size() % tile_bytes != 0) throw std::invalid_argument("permute_key_rows: rows are not whole 64-key tiles");
  std::vector<std::uint8_t> out(rows.size());
  for (std::size_t t = 0; t < rows.size() / tile_bytes; ++t)
    for (int r = 0; r < kMmaKeyTile; ++r)
      std::memcpy(&out[t * tile_bytes + static_cast<std::size_t>(r) * row_bytes],
                  &rows[t * tile_bytes + static_cast<std::size_t>(key_at_row(r)) * row_bytes], row_bytes);
  return out;
}

std::vector<float> mma_padded_k_scales(const MmaInputs& in, int np) {
  const std::size_t hkv = in.kv_heads;
  std::vector<float> ks(hkv * np, 0.0f);
  for (std::size_t h = 0; h < hkv; ++h)
    for (int j = 0; j < in.tokens; ++j) ks[h * np + j] = in.k_scales[h * in.tokens + j];
  return ks;
}

std::vector<std::uint8_t> mma_v_transposed(const MmaInputs& in, int np, VtElement element, const char* family) {
  const std::size_t hkv = in.kv_heads, d = in.dim, n = in.tokens, eb = element == VtElement::e4m3_code ? 1 : 2;
  const Format e4m3 = format_of(FormatId::e4m3), bf16 = format_of(FormatId::bf16);
  std::vector<std::uint8_t> vt(hkv * d * np * eb, 0);
  for (std::size_t h = 0; h < hkv; ++h)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t c = 0; c < d; ++c) {
        const float x = in.v_values[(h * n + j) * d + c];
        if (in.pv == PvType::e4m3 && static_cast<float>(round_to(e4m3, x)) != x)
          throw std::invalid_argument(std::string(family) + ": e4m3 PV needs V values that are e4m3 values");
        if (in.pv == PvType::bf16 && static_cast<float>(round_to(bf16, x)) != x)
          throw std::invalid_argument(std::string(family) + ": bf16 PV needs V values that are bf16 values");
        const std::size_t at = (h * d + c) * np + j;
        if (element == VtElement::e4m3_code) {
          vt[at] = static_cast<std::uint8_t>(encode(e4m3, x));
        } else if (element == VtElement::bf16) {
          const std::uint16_t b = bf16_bits(x);
          std::memcpy(&vt[2 * at], &b, 2);
        } else {
          const std::uint16_t b = fp16_bits(x);
          std::memcpy(&vt[2 * at], &b, 2);
        }
      }
  return vt;
}

std::vector<float> pick_rows(const std::vector<float>& all, int heads, int tokens, int dim, const std::vector<int>& rows) {
  std::vector<float> picked(static_cast<std::size_t>(heads) * rows.size() * dim);
  for (int h = 0; h < heads; ++h)
    for (std::size_t r = 0; r < rows.size(); ++r)
      std::copy_n(&all[(static_cast<std::size_t>(h) * tokens + rows[r]) * dim], dim, &picked[(h * rows.size() + r) * dim]);
  return picked;
}

}  // namespace qattn::gpu
