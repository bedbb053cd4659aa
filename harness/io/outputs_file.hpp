#pragma once
// Attention outputs made by a kernel the lab did not write, in HDF5 schema qattn-outputs/1, so that
// `qattn score` can measure them against the float64 reference and against a recipe's emulation:
//
//   /                     attrs: schema = "qattn-outputs/1", kernel (string: what made them),
//                                recipe (string, optional: the one-line recipe the kernel implements),
//                                dataset (string, optional: the dump the inputs came from)
//   /layers/<L>/o         [Hq, R, d] float16 | bfloat16 | float32: the output of every query head
//   /layers/<L>/rows      [R] integer (optional): the query rows of o, strictly increasing;
//                         absent = all rows 0..R-1
//     group attrs:        context (integer, optional): the first-n tokens the kernel saw
//                         (default: R without `rows`, else the dump's length)
//
// The reader validates everything it can without the dump and names the file, the path inside it
// and what was expected; values must be finite (a kernel that writes NaN or Inf fails, named).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/io/dataset_file.hpp"

namespace qattn {

inline constexpr const char* kOutputsSchemaName = "qattn-outputs";
inline constexpr int kOutputsSchemaVersion = 1;

struct LayerOutputs {
  std::string layer;        // the <L> of /layers/<L>
  int context = 0;          // tokens the kernel saw; 0 = not stated (the reader of a dump resolves it)
  bool rows_listed = false; // /layers/<L>/rows present
  std::vector<int> rows;    // query rows of o (all rows 0..R-1 when not listed)
  TensorF o;                // [Hq, R, d]
};

struct OutputsFile {
  std::string path;
  std::string kernel;
  std::string recipe;       // "" when the file names none
  std::map<std::string, AttrValue> attrs;
  std::vector<LayerOutputs> layers;  // numeric names in numeric order
};

// Called for each layer with what its o declares (heads, rows, dim), its context (0 = not stated)
// and its last row, before any of o is read: a caller that knows the dump refuses a mismatch by
// throwing, so a small file that declares a huge o is refused without reading it.
using OutputsShapeCheck = std::function<void(const std::string& layer, int heads, int rows, int dim, int context, int last_row)>;

OutputsFile read_outputs(const std::string& path, const OutputsShapeCheck& check = {});

// Writes through PATH.tmp and a rename. dtype: fp32, fp16 or bf16 (values rounded by the lab's codec).
void write_outputs(const std::string& path, const OutputsFile& out, FormatId dtype = FormatId::fp32);

}  // namespace qattn
