#pragma once
// NVIDIA only (mma.sync with e4m3 operands, sm_89 and newer): runs the hardware's fp8 matrix
// instruction on given inputs, one instruction per case, so that tests can measure how it
// accumulates (tests/gpu/test_mma_accumulator.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/host_device.hpp"

namespace qattn::gpu {

inline constexpr int kProbeM = 16, kProbeN = 8, kProbeK = 32;

// Fragment layout of mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k32", 8-bit types). lane = 4 g + t (g = groupID 0..7, t =
// threadID_in_group 0..3); byte j of a 32-bit register is its bits 8j..8j+7:
//   A (16x32, row):  a[0] byte j = A[g][4t+j]      a[1] byte j = A[g+8][4t+j]
//                    a[2] byte j = A[g][16+4t+j]   a[3] byte j = A[g+8][16+4t+j]
//   B (32x8, col):   b[0] byte j = B[4t+j][g]      b[1] byte j = B[16+4t+j][g]
//   C, D (16x8):     c[0] = (g, 2t)   c[1] = (g, 2t+1)   c[2] = (g+8, 2t)   c[3] = (g+8, 2t+1)
QATTN_HD constexpr int mma_a_row(int lane, int reg) { return lane / 4 + 8 * (reg % 2); }
QATTN_HD constexpr int mma_a_col(int lane, int reg, int byte) { return 4 * (lane % 4) + byte + 16 * (reg / 2); }
QATTN_HD constexpr int mma_b_row(int lane, int reg, int byte) { return 4 * (lane % 4) + byte + 16 * reg; }
QATTN_HD constexpr int mma_b_col(int lane) { return lane / 4; }
QATTN_HD constexpr int mma_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
QATTN_HD constexpr int mma_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

// D = A B + C by one mma_e4m3_m16n8k32 per case (one warp per case).
//   a: [cases][16][32] e4m3 codes, A[m][k] row-major; b: [cases][32][8] e4m3 codes, B[k][n];
//   c: [cases][16][8] fp32. Returns D [cases][16][8].
// Throws std::invalid_argument on inconsistent sizes, std::runtime_error on a CUDA error (an
// sm_80 device traps: it has no e4m3 mma).
std::vector<float> mma_e4m3_probe(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                  const std::vector<float>& c);

// Fragment layout of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16", 16-bit types): half j (bits 16j..16j+15) of a 32-bit register is
//   A (16x16, row):  a[r] half j = A[g + 8 (r % 2)][2t + j + 8 (r / 2)]
//   B (16x8, col):   b[r] half j = B[2t + j + 8 r][g];   C, D as for m16n8k32.
inline constexpr int kProbeK16 = 16;
QATTN_HD constexpr int mma16_a_col(int lane, int reg, int half) { return 2 * (lane % 4) + half + 8 * (reg / 2); }
QATTN_HD constexpr int mma16_b_row(int lane, int reg, int half) { return 2 * (lane % 4) + half + 8 * reg; }

// D = A B + C by one mma.sync m16n8k16 with fp16 operands and fp32 accumulators per case:
// a [cases][16][16] fp16 bit patterns (A[m][k]), b [cases][16][8] (B[k][n]), c [cases][16][8].
std::vector<float> mma_f16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                 const std::vector<float>& c);

// "name (sm_XY)" of device 0: which instruction path the probe measured depends on it.
std::string mma_probe_device();

}  // namespace qattn::gpu
