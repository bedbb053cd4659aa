#include "harness/io/dataset_file.hpp"

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "harness/io/hdf5_detail.hpp"
#include "harness/io/hdf5_probe.hpp"
#include "harness/system/memory.hpp"
#include "kernels/formats/codec.hpp"

namespace qattn {

namespace {

using namespace h5;

// ---- datasets of a layer ----

struct TensorShape {
  std::vector<hsize_t> dims;
  FormatId dtype;
};

TensorShape check_tensor(const std::string& file, const H5::Group& g, const std::string& path, const std::string& name,
                         const char* expected_shape) {
  const std::string where = path + "/" + name;
  if (!g.nameExists(name)) fail(file, where, std::string("missing dataset; expected ") + expected_shape + " float16, bfloat16 or float32");
  if (g.childObjType(name) != H5O_TYPE_DATASET) fail(file, where, std::string("is not a dataset; expected ") + expected_shape);
  const H5::DataSet ds = g.openDataSet(name);
  const H5::DataSpace sp = ds.getSpace();
  const int rank = sp.getSimpleExtentNdims();
  if (rank != 3) fail(file, where, "rank " + std::to_string(rank) + "; expected 3 " + expected_shape);
  TensorShape s;
  s.dims.resize(3);
  sp.getSimpleExtentDims(s.dims.data());
  if (s.dims[0] == 0 || s.dims[1] == 0 || s.dims[2] == 0) fail(file, where, "shape " + shape_text(s.dims) + " has an empty dimension");
  for (const hsize_t n : s.dims) {
    if (n > static_cast<hsize_t>(std::numeric_limits<int>::max())) fail(file, where, "shape " + shape_text(s.dims) + "; expected each dimension at most 2147483647");
  }
  const auto dt = float_dtype(ds);
  if (!dt) fail(file, where, "dtype " + type_text(ds) + "; expected float16, bfloat16 or float32");
  s.dtype = *dt;
  return s;
}

// The variants of schema 2 (datasets/README.md): the soft-cap and chunk attributes and one sink
// logit per query head, each optional; a version-1 file that has one is refused rather than read as plain.
void check_variants(const std::string& file, const std::string& path, const H5::Group& g,
                    const std::map<std::string, AttrValue>& attrs, int version, LayerInfo& info) {
  const auto needs_v2 = [&](const std::string& what) {
    if (version < 2) fail(file, path, what + " is a schema-2 field, but the file says qattn-dump/" + std::to_string(version) + "; expected \"qattn-dump/2\"");
  };
  if (attrs.count("softcap") != 0) {
    needs_v2("attribute 'softcap'");
    info.softcap = as_real(need(file, path, attrs, "softcap", AttrValue::Kind::real, "a positive float"));
    if (!(info.softcap > 0) || !std::isfinite(info.softcap)) {
      fail(file, path, "attribute 'softcap' = " + std::to_string(info.softcap) + "; expected a positive finite float (absent = none)");
    }
  }
  if (attrs.count("attention_chunk") != 0) {
    needs_v2("attribute 'attention_chunk'");
    const long long chunk = need(file, path, attrs, "attention_chunk", AttrValue::Kind::integer, "a positive token count").i;
    if (chunk < 1 || chunk > std::numeric_limits<int>::max()) {
      fail(file, path, "attribute 'attention_chunk' = " + std::to_string(chunk) + "; expected 1 .. 2147483647 (absent = none)");
    }
    info.chunk = static_cast<int>(chunk);
  }
  // One value per query head: the sink logits and ALiBi's slopes.
  for (const auto& [name, values] : {std::pair{"sinks", &info.sinks}, std::pair{"alibi_slopes", &info.alibi}}) {
    if (!g.nameExists(name)) continue;
    needs_v2(std::string("dataset '") + name + "'");
    const std::string where = path + "/" + name;
    if (g.childObjType(name) != H5O_TYPE_DATASET) fail(file, where, "is not a dataset; expected [Hq] float (one per query head)");
    const H5::DataSet ds = g.openDataSet(name);
    const H5::DataSpace sp = ds.getSpace();
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, sp.getSimpleExtentNdims())));
    if (!dims.empty()) sp.getSimpleExtentDims(dims.data());
    if (dims.size() != 1 || dims[0] != static_cast<hsize_t>(info.q_heads) || ds.getTypeClass() != H5T_FLOAT) {
      fail(file, where, "shape " + shape_text(dims) + " " + type_text(ds) + "; expected [" + std::to_string(info.q_heads) + "] float (one per query head)");
    }
    values->resize(dims[0]);
    ds.read(values->data(), H5::PredType::NATIVE_DOUBLE);
    for (std::size_t h = 0; h < values->size(); ++h) {
      if (!std::isfinite((*values)[h])) fail(file, where + "[" + std::to_string(h) + "]", "is not finite; expected a finite value");
    }
  }
}

LayerInfo check_layer(const std::string& file, const H5::Group& layers, const std::string& name, int version) {
  const std::string path = "/layers/" + name;
  if (layers.childObjType(name) != H5O_TYPE_GROUP) fail(file, path, "is not a group; expected a group holding q, k, v");
  const H5::Group g = layers.openGroup(name);
  const TensorShape q = check_tensor(file, g, path, "q", "[Hq, N, d]");
  const TensorShape k = check_tensor(file, g, path, "k", "[Hkv, N, d]");
  const TensorShape v = check_tensor(file, g, path, "v", "[Hkv, N, dv]");
  if (v.dims[0] != k.dims[0] || v.dims[1] != k.dims[1]) {
    fail(file, path + "/v", "shape " + shape_text(v.dims) + " has other heads or tokens than k's " + shape_text(k.dims) + "; expected [Hkv, N, dv]");
  }
  if (v.dims[2] != k.dims[2] && version < 2) {
    fail(file, path + "/v", "head dim " + std::to_string(v.dims[2]) + " differs from k's " + std::to_string(k.dims[2]) +
                                "; a V head dim of its own is a schema-2 field, but the file says qattn-dump/" + std::to_string(version));
  }
  if (q.dims[1] != k.dims[1]) fail(file, path + "/q", "has " + std::to_string(q.dims[1]) + " tokens but k has " + std::to_string(k.dims[1]) + "; expected equal");
  if (q.dims[2] != k.dims[2]) fail(file, path + "/q", "head dim " + std::to_string(q.dims[2]) + " differs from k's " + std::to_string(k.dims[2]) + "; expected equal");
  if (q.dims[0] % k.dims[0] != 0) fail(file, path, "Hq = " + std::to_string(q.dims[0]) + " is not a multiple of Hkv = " + std::to_string(k.dims[0]));
  if (q.dtype != k.dtype || q.dtype != v.dtype) fail(file, path, "q, k and v have different dtypes; expected one dtype for all three");

  const auto attrs = read_all_attrs(file, path, g);
  LayerInfo info;
  info.name = name;
  info.q_heads = static_cast<int>(q.dims[0]);
  info.kv_heads = static_cast<int>(k.dims[0]);
  info.tokens = static_cast<int>(q.dims[1]);
  info.dim = static_cast<int>(q.dims[2]);
  info.v_dim = static_cast<int>(v.dims[2]);
  info.dtype = q.dtype;
  const long long causal = need(file, path, attrs, "causal", AttrValue::Kind::integer, "0 or 1").i;
  if (causal != 0 && causal != 1) fail(file, path, "attribute 'causal' = " + std::to_string(causal) + "; expected 0 or 1");
  info.causal = causal == 1;
  const long long window = need(file, path, attrs, "sliding_window", AttrValue::Kind::integer, "an integer >= 0 (0 = none)").i;
  if (window < 0 || window > std::numeric_limits<int>::max()) {
    fail(file, path, "attribute 'sliding_window' = " + std::to_string(window) + "; expected 0 (none) .. 2147483647");
  }
  info.sliding_window = static_cast<int>(window);
  info.softmax_scale = as_real(need(file, path, attrs, "softmax_scale", AttrValue::Kind::real, "a positive float"));
  if (!(info.softmax_scale > 0) || !std::isfinite(info.softmax_scale)) {
    fail(file, path, "attribute 'softmax_scale' = " + std::to_string(info.softmax_scale) + "; expected a positive finite float");
  }
  info.rope = need(file, path, attrs, "rope", AttrValue::Kind::string, "\"applied\" or \"none\"").s;
  if (info.rope != "applied" && info.rope != "none") fail(file, path, "attribute 'rope' = \"" + info.rope + "\"; expected \"applied\" or \"none\"");
  check_variants(file, path, g, attrs, version, info);
  return info;
}

// Decimal strings by value, of any length (a layer may be named 99999999999999999999).
bool numeric_less(const std::string& a, const std::string& b) {
  const std::string x = a.substr(std::min(a.find_first_not_of('0'), a.size() - 1));
  const std::string y = b.substr(std::min(b.find_first_not_of('0'), b.size() - 1));
  return x.size() != y.size() ? x.size() < y.size() : x < y;
}

// Reads q/k/v[head, 0:tokens, :] as float (exactly: 16-bit values are decoded by the lab's codec).
void read_head(const H5::DataSet& ds, FormatId dtype, int head, int tokens, int dim, float* dst) {
  const hsize_t start[3] = {static_cast<hsize_t>(head), 0, 0};
  const hsize_t count[3] = {1, static_cast<hsize_t>(tokens), static_cast<hsize_t>(dim)};
  H5::DataSpace fs = ds.getSpace();
  fs.selectHyperslab(H5S_SELECT_SET, count, start);
  const H5::DataSpace ms(3, count);
  const std::size_t n = static_cast<std::size_t>(tokens) * dim;
  if (dtype == FormatId::fp32) {
    ds.read(dst, H5::PredType::NATIVE_FLOAT, ms, fs);
    return;
  }
  std::vector<std::uint16_t> raw(n);
  ds.read(raw.data(), half_type(dtype), ms, fs);  // HDF5 only reorders bytes if the file is big endian
  const Format f = format_of(dtype);
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(decode(f, raw[i]));
}

void check_finite(const std::string& file, const std::string& where, const TensorF& t, const std::vector<int>& heads) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (std::isfinite(t.data[i])) continue;
    const std::size_t c = i % t.dim, n = (i / t.dim) % t.tokens, h = i / (static_cast<std::size_t>(t.dim) * t.tokens);
    fail(file, where + "[head " + std::to_string(heads[h]) + ", token " + std::to_string(n) + ", channel " + std::to_string(c) + "]",
         std::string("is ") + (std::isnan(t.data[i]) ? "NaN" : "Inf") + "; expected finite values");
  }
}

TensorF read_tensor(const std::string& file, const H5::Group& g, const std::string& path, const std::string& name,
                    FormatId dtype, const std::vector<int>& heads, int tokens, int dim) {
  const H5::DataSet ds = g.openDataSet(name);
  try {
    require_memory(file + ": " + path + "/" + name + " (" + std::to_string(heads.size()) + " heads of " + std::to_string(tokens) + " x " +
                       std::to_string(dim) + ") as float32",
                   checked_product(path + "/" + name, {4, heads.size(), static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(dim)}));
  } catch (const std::invalid_argument& e) {
    throw DatasetError(e.what());
  }
  TensorF t(static_cast<int>(heads.size()), tokens, dim);
  for (std::size_t i = 0; i < heads.size(); ++i) read_head(ds, dtype, heads[i], tokens, dim, t.row(static_cast<int>(i), 0));
  check_finite(file, path + "/" + name, t, heads);
  return t;
}

}  // namespace

std::string AttrValue::text() const {
  switch (kind) {
    case Kind::string: return "\"" + s + "\"";
    case Kind::integer: return std::to_string(i);
    case Kind::real: {
      std::ostringstream o;
      o.precision(17);
      o << d;
      // A whole-number float reads as an integer otherwise ("context = 256; expected a positive
      // token count" when the trouble is that 256.0 is a float).
      std::string t = o.str();
      if (std::isfinite(d) && t.find_first_of(".e") == std::string::npos) t += ".0 (a float)";
      return t;
    }
  }
  return "";
}

AttrValue attr(const std::string& s) { return {AttrValue::Kind::string, s, 0, 0}; }
AttrValue attr(long long i) { return {AttrValue::Kind::integer, "", i, 0}; }
AttrValue attr(double d) { return {AttrValue::Kind::real, "", 0, d}; }

const LayerInfo& DatasetInfo::layer(const std::string& name) const {
  for (const LayerInfo& l : layers)
    if (l.name == name) return l;
  std::string known;
  for (const LayerInfo& l : layers) known += (known.empty() ? "" : ", ") + l.name;
  throw DatasetError(path + ": /layers/" + name + ": no such layer; the file has layers " + known);
}

namespace {

DatasetInfo read_structure(const std::string& path);

// The first and last element of each layer's q, k, v (reads walk the chunk index at both ends).
void touch_tensors(const std::string& path, const DatasetInfo& info) {
  with_hdf5_errors(path, [&] {
    const H5::H5File f(path, H5F_ACC_RDONLY);
    for (const LayerInfo& l : info.layers) {
      for (const char* name : {"q", "k", "v"}) {
        const H5::DataSet ds = f.openDataSet("/layers/" + l.name + "/" + name);
        const int heads = name[0] == 'q' ? l.q_heads : l.kv_heads;
        for (const hsize_t at : {hsize_t{0}, static_cast<hsize_t>(heads - 1)}) {
          const hsize_t start[3] = {at, at == 0 ? 0 : static_cast<hsize_t>(l.tokens - 1), at == 0 ? 0 : static_cast<hsize_t>(l.dim - 1)};
          const hsize_t one[3] = {1, 1, 1};
          H5::DataSpace fs = ds.getSpace();
          fs.selectHyperslab(H5S_SELECT_SET, one, start);
          float x = 0;
          ds.read(&x, H5::PredType::NATIVE_FLOAT, H5::DataSpace(3, one), fs);
        }
      }
    }
    return 0;
  });
}

}  // namespace

DatasetInfo open_dataset(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    throw DatasetError(path + ": no such file" +
                       (std::filesystem::path(path).is_relative() && !ec ? " (a relative path, read from the current folder " + cwd + ")" : std::string()));
  }
  if (!std::filesystem::is_regular_file(path)) throw DatasetError(path + ": not a regular file; expected an HDF5 file of schema qattn-dump/1");
  if (::access(path.c_str(), R_OK) != 0) throw DatasetError(path + ": cannot read it (" + std::strerror(errno) + ")");
  read_first_in_child(path, [&] { touch_tensors(path, read_structure(path)); }, "qattn-dump/1");
  return read_structure(path);
}

namespace {

DatasetInfo read_structure(const std::string& path) {
  return with_hdf5_errors(path, [&] {
    if (H5::H5File::isHdf5(path.c_str()) <= 0) {
      throw DatasetError(path + ": not an HDF5 file (or truncated before its superblock); expected an HDF5 file of schema " +
                         std::string(kSchemaName) + "/" + std::to_string(kSchemaVersion));
    }
    H5::H5File f;
    try {
      f.openFile(path, H5F_ACC_RDONLY);
    } catch (const H5::Exception&) {
      throw DatasetError(path + ": HDF5 cannot open it (truncated or corrupt); expected a complete HDF5 file");
    }
    DatasetInfo info;
    info.path = path;
    info.attrs = read_all_attrs(path, "/", f);
    const std::string schema = need(path, "/", info.attrs, "schema", AttrValue::Kind::string, "\"qattn-dump/1\" or \"qattn-dump/2\"").s;
    const std::string prefix = std::string(kSchemaName) + "/";
    if (schema.rfind(prefix, 0) != 0 || !is_number(schema.substr(prefix.size()))) {
      fail(path, "/", "attribute 'schema' = \"" + schema + "\"; expected \"qattn-dump/1\" or \"qattn-dump/2\"");
    }
    const int version = std::stoi(schema.substr(prefix.size()));
    if (version > kSchemaVersion) {
      fail(path, "/", "schema \"" + schema + "\" is newer than this qattn reads (qattn-dump/" + std::to_string(kSchemaVersion) + "); update qattn");
    }
    if (version < 1) fail(path, "/", "attribute 'schema' = \"" + schema + "\"; expected \"qattn-dump/1\" or \"qattn-dump/2\"");
    for (const char* key : {"model", "weights", "text_source", "created_by", "created_at"}) {
      need(path, "/", info.attrs, key, AttrValue::Kind::string, "a string");
    }
    const long long n_tokens = need(path, "/", info.attrs, "n_tokens", AttrValue::Kind::integer, "the token count").i;
    if (n_tokens < 1 || n_tokens > std::numeric_limits<int>::max()) {
      fail(path, "/", "attribute 'n_tokens' = " + std::to_string(n_tokens) + "; expected 1 .. 2147483647");
    }

    if (!f.nameExists("layers") || f.childObjType("layers") != H5O_TYPE_GROUP) {
      fail(path, "/layers", "missing group; expected /layers/<L> groups holding q, k, v");
    }
    const H5::Group layers = f.openGroup("layers");
    std::vector<std::string> names;
    for (hsize_t i = 0; i < layers.getNumObjs(); ++i) names.push_back(layers.getObjnameByIdx(i));
    for (const std::string& name : names) need_utf8(path, "/layers", "the group name", name);
    if (names.empty()) fail(path, "/layers", "is empty; expected at least one layer");
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
      // Numbered layers first, by value; named ones after, by name (a strict weak order).
      if (is_number(a) != is_number(b)) return is_number(a);
      if (is_number(a)) return numeric_less(a, b);
      return a < b;
    });
    for (const std::string& name : names) {
      info.layers.push_back(check_layer(path, layers, name, version));
      if (info.layers.back().tokens != n_tokens) {
        fail(path, "/layers/" + name + "/q", "has " + std::to_string(info.layers.back().tokens) +
                                                  " tokens but the root attribute n_tokens = " + std::to_string(n_tokens) + "; expected equal");
      }
    }
    info.n_tokens = static_cast<int>(n_tokens);
    if (f.nameExists("tokens")) {
      const H5::DataSet t = f.openDataSet("tokens");
      const H5::DataSpace sp = t.getSpace();
      std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(sp.getSimpleExtentNdims(), 0)));
      if (!dims.empty()) sp.getSimpleExtentDims(dims.data());
      if (dims.size() != 1 || dims[0] != static_cast<hsize_t>(n_tokens) || t.getTypeClass() != H5T_INTEGER) {
        fail(path, "/tokens", "shape " + shape_text(dims) + " " + type_text(t) + "; expected [" + std::to_string(n_tokens) + "] int32");
      }
      info.has_tokens = true;
    }
    return info;
  });
}

}  // namespace

LayerSlice load_layer(const DatasetInfo& info, const std::string& layer, const SliceRequest& req) {
  const LayerInfo& l = info.layer(layer);
  const std::string path = "/layers/" + layer;
  const int tokens = req.tokens == 0 ? l.tokens : req.tokens;
  if (tokens < 0 || tokens > l.tokens) {
    fail(info.path, path, "asked for the first " + std::to_string(req.tokens) + " tokens; the layer has " + std::to_string(l.tokens));
  }
  // Q, K and V together, checked before anything is built (the head lists of a file declaring 2^30
  // heads are gigabytes themselves): one error naming the file, not a read of Q before K's refusal.
  const std::uint64_t nq = req.heads.empty() ? static_cast<std::uint64_t>(l.q_heads) : req.heads.size();
  const std::uint64_t nkv = req.heads.empty() ? static_cast<std::uint64_t>(l.kv_heads) : req.heads.size();
  try {
    // Each head at the larger of Q/K's and V's head dims: a bound on q, k and v together.
    const std::uint64_t per_head = checked_product(path, {4, static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(std::max(l.dim, l.v_dim))});
    const std::uint64_t heads = checked_sum(path, {nq, nkv, nkv});
    require_memory(info.path + ": " + path + " (q, k and v: " + std::to_string(nq) + " + 2 x " + std::to_string(nkv) + " heads of " +
                       std::to_string(tokens) + " x " + std::to_string(l.dim) + ") as float32",
                   checked_sum(path, {checked_product(path, {per_head, heads}), checked_product(path, {8, heads})}));
  } catch (const std::invalid_argument& e) {
    throw DatasetError(e.what());
  }
  LayerSlice out;
  const int group = l.q_heads / l.kv_heads;
  if (req.heads.empty()) {
    for (int h = 0; h < l.q_heads; ++h) out.q_heads.push_back(h);
    for (int h = 0; h < l.kv_heads; ++h) out.kv_heads.push_back(h);
  } else {
    std::set<int> seen;
    for (int h : req.heads) {
      if (h < 0 || h >= l.q_heads) fail(info.path, path, "query head " + std::to_string(h) + " requested; the layer has heads 0.." + std::to_string(l.q_heads - 1));
      if (!seen.insert(h).second) fail(info.path, path, "query head " + std::to_string(h) + " requested twice");
      out.q_heads.push_back(h);
      out.kv_heads.push_back(h / group);
    }
  }
  return with_hdf5_errors(info.path, [&] {
    const H5::H5File f(info.path, H5F_ACC_RDONLY);
    const H5::Group g = f.openGroup(path);
    Problem& p = out.problem;
    p.q = read_tensor(info.path, g, path, "q", l.dtype, out.q_heads, tokens, l.dim);
    p.k = read_tensor(info.path, g, path, "k", l.dtype, out.kv_heads, tokens, l.dim);
    p.v = read_tensor(info.path, g, path, "v", l.dtype, out.kv_heads, tokens, l.v_dim);
    p.causal = l.causal;
    p.window = l.sliding_window;
    p.softmax_scale = l.softmax_scale;
    p.softcap = l.softcap;
    p.chunk = l.chunk;
    for (int h : out.q_heads) {
      if (!l.sinks.empty()) p.sinks.push_back(l.sinks[static_cast<std::size_t>(h)]);
      if (!l.alibi.empty()) p.alibi.push_back(l.alibi[static_cast<std::size_t>(h)]);
    }
    return out;
  });
}

std::string schema_for(const std::vector<LayerToWrite>& layers) {
  const bool variants = std::any_of(layers.begin(), layers.end(), [](const LayerToWrite& l) {
    return l.softcap > 0 || !l.sinks.empty() || !l.alibi.empty() || l.chunk > 0 || l.v.dim != l.k.dim;
  });
  return std::string(kSchemaName) + (variants ? "/2" : "/1");
}

void write_dataset(const std::string& path, const std::map<std::string, AttrValue>& attrs,
                   const std::vector<LayerToWrite>& layers, FormatId dtype, const std::optional<std::vector<int>>& tokens) {
  h5::need_storable_attrs(path, "/", attrs);
  for (const LayerToWrite& l : layers) h5::need_group_name(path, "/layers", l.name);
  std::uint64_t payload = tokens ? 4u * tokens->size() : 0u;
  for (const LayerToWrite& l : layers) payload += (dtype == FormatId::fp32 ? 4u : 2u) * (l.q.size() + l.k.size() + l.v.size());
  h5::write_atomically(path, dtype, payload, [&](H5::H5File& f) {
    using h5::put_attr;
    for (const auto& [k, v] : attrs) put_attr(f, k, v);
    H5::Group lg = f.createGroup("layers");
    const Format fmt = format_of(dtype);
    for (const LayerToWrite& l : layers) {
      H5::Group g = lg.createGroup(l.name);
      for (const auto& [name, t] : {std::pair<const char*, const TensorF*>{"q", &l.q}, {"k", &l.k}, {"v", &l.v}}) {
        const hsize_t dims[3] = {static_cast<hsize_t>(t->heads), static_cast<hsize_t>(t->tokens), static_cast<hsize_t>(t->dim)};
        const H5::DataSpace sp(3, dims);
        if (dtype == FormatId::fp32) {
          g.createDataSet(name, H5::PredType::IEEE_F32LE, sp).write(t->data.data(), H5::PredType::NATIVE_FLOAT);
        } else {
          std::vector<std::uint16_t> raw(t->size());
          for (std::size_t i = 0; i < raw.size(); ++i) {
            if (!(std::fabs(t->data[i]) <= max_finite(fmt))) {
              throw DatasetError(path + ": /layers/" + l.name + "/" + name + ": value " + std::to_string(t->data[i]) +
                                 " at element " + std::to_string(i) + " does not fit " + name_of(dtype) +
                                 " (max " + std::to_string(max_finite(fmt)) + "); expected finite values in range");
            }
            raw[i] = static_cast<std::uint16_t>(encode(fmt, t->data[i]));
          }
          const H5::FloatType ht = half_type(dtype);
          g.createDataSet(name, ht, sp).write(raw.data(), ht);
        }
      }
      put_attr(g, "causal", attr(static_cast<long long>(l.causal ? 1 : 0)));
      put_attr(g, "sliding_window", attr(static_cast<long long>(l.sliding_window)));
      put_attr(g, "softmax_scale", attr(l.softmax_scale));
      put_attr(g, "rope", attr(l.rope));
      if (l.softcap > 0) put_attr(g, "softcap", attr(l.softcap));
      if (l.chunk > 0) put_attr(g, "attention_chunk", attr(static_cast<long long>(l.chunk)));
      for (const auto& [name, values] : {std::pair{"sinks", &l.sinks}, std::pair{"alibi_slopes", &l.alibi}}) {
        if (values->empty()) continue;
        const hsize_t n = values->size();
        const H5::DataSpace sp(1, &n);
        g.createDataSet(name, H5::PredType::IEEE_F64LE, sp).write(values->data(), H5::PredType::NATIVE_DOUBLE);
      }
    }
    if (tokens) {
      const hsize_t n = tokens->size();
      const H5::DataSpace sp(1, &n);
      f.createDataSet("tokens", H5::PredType::STD_I32LE, sp).write(tokens->data(), H5::PredType::NATIVE_INT);
    }
  }, [](const std::string& written) { (void)open_dataset(written); });
}

}  // namespace qattn
