#pragma once
// NVIDIA sm_90a only: runs one Hopper wgmma per case on given inputs, so that tests can measure how
// the warpgroup instructions accumulate (tests/gpu/test_mma_accumulator.cpp, as for mma.sync). A
// case fills rows 0..15 of the instruction's 64 (warp 0's); the other rows are zero and unread.
#include <cstdint>
#include <vector>

namespace qattn::gpu {

// Where the e4m3 instruction reads A: shared memory (a descriptor, as Q K^T kernels do) or
// registers (as P V does with P fresh from the softmax).
enum class WgmmaA { shared, registers };

// D = A B + C by one wgmma.m64n8k32.f32.e4m3.e4m3 per case.
//   a: [cases][16][32] e4m3 codes (A[m][k]); b: [cases][32][8] e4m3 codes (B[k][n]); c: [cases][16][8].
// Returns D [cases][16][8]. Throws std::invalid_argument on inconsistent sizes, std::runtime_error
// on a CUDA error or when the build holds no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a).
std::vector<float> wgmma_e4m3_probe(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                    const std::vector<float>& c, WgmmaA a_from);

// D = A B + C by one wgmma.m64n8k32.s32.s8.s8 per case; shapes as above, A and B int8, C and D int32.
std::vector<std::int32_t> wgmma_s8_probe(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b,
                                         const std::vector<std::int32_t>& c);

// D = A B + C by one wgmma.m64n8k16.f32.f16.f16 per case: a [cases][16][16] fp16 bit patterns,
// b [cases][16][8], c [cases][16][8] fp32.
std::vector<float> wgmma_f16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                   const std::vector<float>& c);

// D = A B + C by one wgmma.m64n8k16.f32.bf16.bf16 per case: shapes as wgmma_f16_probe's, a and b
// bf16 bit patterns.
std::vector<float> wgmma_bf16_probe(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                    const std::vector<float>& c);

}  // namespace qattn::gpu
