#pragma once
// Reading and writing Q/K/V dumps in HDF5 schema qattn-dump/1 and /2 (datasets/README.md). The reader
// validates every field and, on any problem, throws DatasetError naming the file, the path inside
// it and what was expected. Loading reads only the requested slice (layers, heads, first tokens).
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/formats/format.hpp"
#include "kernels/problem/problem.hpp"

namespace qattn {

inline constexpr const char* kSchemaName = "qattn-dump";
// Version 2 adds the attention variants: a layer's `softcap` and `attention_chunk` attributes,
// `sinks` and `alibi_slopes` datasets, and a V whose head dim differs from Q's and K's. A dump with none of them is written as version 1, as before (version-1 files load as they always did).
inline constexpr int kSchemaVersion = 2;

struct DatasetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One attribute value as stored: a string, an integer or a float (printed by `qattn inspect`).
struct AttrValue {
  enum class Kind { string, integer, real } kind = Kind::string;
  std::string s;
  long long i = 0;
  double d = 0;
  std::string text() const;
};

struct LayerInfo {
  std::string name;            // the <L> of /layers/<L>
  int q_heads = 0, kv_heads = 0, tokens = 0, dim = 0;
  int v_dim = 0;               // V's head dim: dim, or (schema 2) its own, as in multi-head latent attention
  FormatId dtype = FormatId::fp16;  // fp16, bf16 or fp32 (all three tensors share it)
  bool causal = true;
  int sliding_window = 0;      // 0 = none
  double softmax_scale = 0;
  std::string rope;            // "applied" or "none"
  double softcap = 0;          // logit soft-cap (schema 2; 0 = none)
  std::vector<double> sinks;   // a sink logit per query head (schema 2; empty = none)
  std::vector<double> alibi;   // ALiBi's slope per query head (schema 2, dataset alibi_slopes; empty = none)
  int chunk = 0;               // chunked attention's chunk in tokens (schema 2; 0 = none)
};

struct DatasetInfo {
  std::string path;
  std::map<std::string, AttrValue> attrs;  // every root attribute
  std::vector<LayerInfo> layers;           // numeric names in numeric order
  bool has_tokens = false;
  int n_tokens = 0;
  const LayerInfo& layer(const std::string& name) const;  // throws DatasetError naming the known layers
};

// Opens and validates the whole file's structure (not its values): schema, root attributes, every
// layer's datasets, shapes, dtypes and group attributes, /tokens.
DatasetInfo open_dataset(const std::string& path);

struct SliceRequest {
  std::vector<int> heads;  // query heads; empty = all
  int tokens = 0;          // first n tokens; 0 = all
};

// Q/K/V of one layer, restricted to the request, as a Problem (causal, window and scale from the
// layer's attributes). When a subset of query heads is asked for, K/V hold one KV head per selected
// query head (the KV head it reads), so the result is plain multi-head attention; with all heads,
// GQA is kept. Values are checked finite (the error names the element).
struct LayerSlice {
  Problem problem;
  std::vector<int> q_heads;   // original query head index of each q head
  std::vector<int> kv_heads;  // original KV head index of each k/v head
};
LayerSlice load_layer(const DatasetInfo& info, const std::string& layer, const SliceRequest& request = {});

// Writing (the synthetic generator, tests). Values are rounded to `dtype` by the lab's own codec
// (round to nearest even), written to PATH.tmp and renamed into place, so a crash leaves no partial
// file under PATH.
struct LayerToWrite {
  std::string name;
  TensorF q, k, v;
  bool causal = true;
  int sliding_window = 0;
  double softmax_scale = 0;
  std::string rope = "applied";
  double softcap = 0;          // written (with schema 2) only when > 0
  std::vector<double> sinks;   // written (with schema 2) only when not empty
  std::vector<double> alibi;   // ALiBi slopes, written (with schema 2) only when not empty
  int chunk = 0;               // written (with schema 2) only when > 0
};
// "qattn-dump/2" when a layer carries an attention variant, else "qattn-dump/1".
std::string schema_for(const std::vector<LayerToWrite>& layers);
void write_dataset(const std::string& path, const std::map<std::string, AttrValue>& attrs,
                   const std::vector<LayerToWrite>& layers, FormatId dtype,
                   const std::optional<std::vector<int>>& tokens = std::nullopt);

AttrValue attr(const std::string& s);
AttrValue attr(long long i);
AttrValue attr(double d);

}  // namespace qattn
