#pragma once
// Host-side layouts the matrix families (flash_mma, flash_wgmma) read, built from MmaInputs
// (bench/matrix_bench.hpp: the benchmarks' random device inputs in the same layouts). Both families upload these; only the
// element type of V^T differs (fp16 values for mma.sync's HMMAs, e4m3 codes for wgmma's e4m3, bf16
// values for wgmma's bf16).
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/gpu/common/matrix_inputs.hpp"
#include "kernels/gpu/common/platform.hpp"  // DeviceBuffers: this header is for .cu files

namespace qattn::gpu {

// Keys rounded up to whole tiles of kMatrixKeyPad (128) keys.
int mma_padded_tokens(int n);

// Throws std::invalid_argument naming `family` unless heads and tokens make a problem.
void check_mma_shape(const MmaInputs& in, const char* family);

// Q ([Hq][N][d]) or K ([Hkv][rows_out][d], zero rows past N) as int8 codes, fp16 or bf16 bit patterns.
std::vector<std::uint8_t> mma_qk_rows(const MmaInputs& in, bool is_q, int rows_out);

// K's per-token scales [Hkv][np], zero past N.
std::vector<float> mma_padded_k_scales(const MmaInputs& in, int np);

enum class VtElement { fp16, bf16, e4m3_code };

// Bytes per Q/K element of a QkType (int8 codes: 1; fp16, bf16: 2).
inline int qk_element_bytes(QkType qk) { return qk == QkType::int8 ? 1 : 2; }

// A kernel's order of K rows within each 64-key tile: row r of a tile holds the tile's key
// key_at_row(r) (a permutation of [0, 64)); null keeps key order.
using KeyAtRow = int (*)(int);

// K rows ([heads][np][row_bytes], np a multiple of 64) reordered within each 64 keys by key_at_row.
std::vector<std::uint8_t> permute_key_rows(const std::vector<std::uint8_t>& rows, int row_bytes, KeyAtRow key_at_row);

// V transposed to [Hkv][d][np] (zero keys past N): fp16 bit patterns (e4m3 values widened, exact),
// bf16 bit patterns or e4m3 codes. e4m3 PV needs V values that are e4m3 values, bf16 PV bf16 values
// (std::invalid_argument naming `family`).
std::vector<std::uint8_t> mma_v_transposed(const MmaInputs& in, int np, VtElement element, const char* family);

// The rows `rows` of each head of a [heads][tokens][dim] output.
std::vector<float> pick_rows(const std::vector<float>& all, int heads, int tokens, int dim, const std::vector<int>& rows);

// The fields both families' Params hold under the same names: the problem's shape and softmax.
template <typename Params>
void set_shape(Params& p, int hq, int hkv, int n, int np, bool causal, int window, bool denominator_quantized, float c, float p_mult) {
  p.hq = hq;
  p.hkv = hkv;
  p.n = n;
  p.np = np;
  p.window = window;
  p.causal = causal;
  p.reverse_blocks = causal;  // the longest causal rows start first
  p.denominator_quantized = denominator_quantized;
  p.c = c;
  p.p_mult = p_mult;
}

template <typename Params>
void set_shape(Params& p, const MmaInputs& in, int np) {
  set_shape(p, in.q_heads, in.kv_heads, in.tokens, np, in.causal, in.window, in.denominator_quantized, in.score_factor, in.p_multiplier);
}

// Device copies of MmaInputs in these layouts, in a family's Params (V^T as `vt`).
template <typename Params>
struct MatrixDeviceInputs {
  Params p{};
  DeviceBuffers mem;
  MatrixDeviceInputs(const MmaInputs& in, VtElement vt, const char* family, KeyAtRow key_at_row = nullptr) {
    check_mma_shape(in, family);
    const int n = in.tokens, np = mma_padded_tokens(n);
    p.q = mem.upload(mma_qk_rows(in, true, n));
    const std::vector<std::uint8_t> k_rows = mma_qk_rows(in, false, np);
    p.k = mem.upload(key_at_row ? permute_key_rows(k_rows, in.dim * qk_element_bytes(in.qk), key_at_row) : k_rows);
    if (in.qk == QkType::int8) {
      p.q_scales = mem.upload(in.q_scales);
      p.k_scales = mem.upload(mma_padded_k_scales(in, np));
    }
    p.vt = mem.upload(mma_v_transposed(in, np, vt, family));
    if (!in.v_scales.empty()) p.v_scales = mem.upload(in.v_scales);
    set_shape(p, in, np);
  }
};

}  // namespace qattn::gpu
