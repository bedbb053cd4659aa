#pragma once
// The float64 reference: exact-as-float64 attention, the truth every recipe is measured against.
// It streams over key blocks with an online softmax (never an N x N matrix), runs query blocks in
// parallel (OpenMP), and quantizes nothing.
#include <vector>

#include "kernels/problem/problem.hpp"

namespace qattn {

struct ReferenceOptions {
  int block_q = 128;           // query rows per task
  int block_k = 256;           // keys per streamed block
  std::vector<int> prob_rows;  // query rows whose full probability rows are handed back
};

struct ReferenceResult {
  std::vector<int> rows;       // evaluated query rows, sorted
  TensorD out;                 // [Hq, rows.size(), d]
  std::vector<int> prob_rows;  // as requested
  TensorD probs;               // [Hq, prob_rows.size(), N]; masked keys hold exactly 0
};

ReferenceResult reference_attention(const Problem& p, const ReferenceOptions& opt = {});

}  // namespace qattn
