#include "harness/io/outputs_file.hpp"

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "harness/io/hdf5_detail.hpp"
#include "harness/io/hdf5_probe.hpp"
#include "harness/system/memory.hpp"
#include "kernels/formats/codec.hpp"

namespace qattn {

using namespace h5;

namespace {

// Heads, rows and channels are ints throughout the lab.
constexpr hsize_t kMaxCount = 2147483647;

std::vector<long long> read_rows(const std::string& file, const H5::Group& g, const std::string& where) {
  if (g.childObjType("rows") != H5O_TYPE_DATASET) fail(file, where, "is not a dataset; expected [R] integer query rows");
  const H5::DataSet ds = g.openDataSet("rows");
  const H5::DataSpace sp = ds.getSpace();
  const int rank = sp.getSimpleExtentNdims();
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (!dims.empty()) sp.getSimpleExtentDims(dims.data());
  if (rank != 1 || ds.getTypeClass() != H5T_INTEGER) fail(file, where, "shape " + shape_text(dims) + " " + type_text(ds) + "; expected [R] integer query rows");
  if (dims[0] > kMaxCount) fail(file, where, "shape " + shape_text(dims) + " declares more rows than a context holds; expected at most " + std::to_string(kMaxCount));
  try {
    require_memory(file + ": " + where, checked_product(where, {8, dims[0]}));
  } catch (const std::invalid_argument& e) {
    throw DatasetError(e.what());
  }
  std::vector<long long> rows(dims[0]);
  if (!rows.empty()) ds.read(rows.data(), H5::PredType::NATIVE_LLONG);
  return rows;
}

LayerOutputs read_layer(const std::string& file, const H5::Group& layers, const std::string& name, const OutputsShapeCheck& check) {
  const std::string path = "/layers/" + name;
  if (layers.childObjType(name) != H5O_TYPE_GROUP) fail(file, path, "is not a group; expected a group holding o");
  const H5::Group g = layers.openGroup(name);
  if (!g.nameExists("o")) fail(file, path + "/o", "missing dataset; expected [Hq, R, d] float16, bfloat16 or float32");
  if (g.childObjType("o") != H5O_TYPE_DATASET) fail(file, path + "/o", "is not a dataset; expected [Hq, R, d]");
  const H5::DataSet ds = g.openDataSet("o");
  const H5::DataSpace sp = ds.getSpace();
  const int rank = sp.getSimpleExtentNdims();
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (!dims.empty()) sp.getSimpleExtentDims(dims.data());
  if (rank != 3) fail(file, path + "/o", "shape " + shape_text(dims) + "; expected [Hq, R, d] (rank 3)");
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0) fail(file, path + "/o", "shape " + shape_text(dims) + " has an empty dimension");
  for (int i = 0; i < 3; ++i) {
    if (dims[i] > kMaxCount) {
      fail(file, path + "/o", "shape " + shape_text(dims) + ": dimension " + std::to_string(i) + " is larger than " + std::to_string(kMaxCount) +
                                  "; expected [Hq, R, d] each at most that");
    }
  }
  const auto dt = float_dtype(ds);
  if (!dt) fail(file, path + "/o", "dtype " + type_text(ds) + "; expected float16, bfloat16 or float32");

  // The declared shape against the memory before a byte of o or of its rows is read or listed: a
  // small file can declare a huge dataset (chunked, or never written). o as float32 (and the raw
  // 16-bit values of a half dtype), and the rows as read (int64) and kept (int).
  try {
    const std::uint64_t elems = checked_product(path + "/o", {dims[0], dims[1], dims[2]});
    require_memory(file + ": " + path + "/o " + shape_text(dims),
                   checked_sum(path + "/o", {checked_product(path + "/o", {*dt == FormatId::fp32 ? 4u : 6u, elems}), checked_product(path, {12, dims[1]})}));
  } catch (const std::invalid_argument& e) {
    throw DatasetError(e.what());
  }

  LayerOutputs out;
  out.layer = name;
  const int hq = static_cast<int>(dims[0]), r = static_cast<int>(dims[1]), d = static_cast<int>(dims[2]);
  if (g.nameExists("rows")) {
    const std::vector<long long> rows = read_rows(file, g, path + "/rows");
    if (rows.size() != dims[1]) {
      fail(file, path + "/rows", "holds " + std::to_string(rows.size()) + " rows but o has " + std::to_string(r) + "; expected one row index per output row");
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] > 2147483647LL) fail(file, path + "/rows[" + std::to_string(i) + "]", "= " + std::to_string(rows[i]) + "; expected a row index >= 0");
      if (i > 0 && rows[i] <= rows[i - 1]) {
        fail(file, path + "/rows[" + std::to_string(i) + "]", "= " + std::to_string(rows[i]) + " after " + std::to_string(rows[i - 1]) + "; expected strictly increasing rows");
      }
      out.rows.push_back(static_cast<int>(rows[i]));
    }
    out.rows_listed = true;
  } else {
    for (int i = 0; i < r; ++i) out.rows.push_back(i);
  }
  const auto attrs = read_all_attrs(file, path, g);
  for (const auto& [k, v] : attrs) {
    if (k != "context") fail(file, path, "attribute '" + k + "' is not part of qattn-outputs/1; expected only 'context'");
    if (v.kind != AttrValue::Kind::integer || v.i <= 0 || v.i > 2147483647LL) fail(file, path, "attribute 'context' = " + v.text() + "; expected a positive token count");
    out.context = static_cast<int>(v.i);
  }
  if (!out.rows_listed && out.context == 0) out.context = r;
  if (!out.rows_listed && out.context != r) {
    fail(file, path + "/o", "has " + std::to_string(r) + " rows but the context is " + std::to_string(out.context) +
                                " tokens; expected one row per token, or a /layers/" + name + "/rows dataset naming the rows");
  }
  if (out.context > 0 && out.rows.back() >= out.context) {
    fail(file, path + "/rows", "row " + std::to_string(out.rows.back()) + " is outside the context of " + std::to_string(out.context) + " tokens");
  }

  if (check) check(name, hq, r, d, out.context, out.rows.back());
  out.o = TensorF(hq, r, d);
  const std::size_t n = out.o.size();
  if (*dt == FormatId::fp32) {
    ds.read(out.o.data.data(), H5::PredType::NATIVE_FLOAT);
  } else {
    std::vector<std::uint16_t> raw(n);
    ds.read(raw.data(), half_type(*dt));
    const Format f = format_of(*dt);
    for (std::size_t i = 0; i < n; ++i) out.o.data[i] = static_cast<float>(decode(f, raw[i]));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(out.o.data[i])) continue;
    const std::size_t c = i % d, row = (i / d) % r, h = i / (static_cast<std::size_t>(d) * r);
    fail(file, path + "/o[head " + std::to_string(h) + ", row " + std::to_string(out.rows[row]) + ", channel " + std::to_string(c) + "]",
         std::string("is ") + (std::isnan(out.o.data[i]) ? "NaN" : "Inf") + "; the kernel must write finite outputs");
  }
  return out;
}

}  // namespace

// Without the child-process read first (read_outputs below does that).
static OutputsFile read_outputs_directly(const std::string& path, const OutputsShapeCheck& check) {
  return with_hdf5_errors(path, [&] {
    if (H5::H5File::isHdf5(path.c_str()) <= 0) {
      throw DatasetError(path + ": not an HDF5 file; expected an HDF5 file of schema qattn-outputs/1");
    }
    H5::H5File f;
    try {
      f.openFile(path, H5F_ACC_RDONLY);
    } catch (const H5::Exception&) {
      throw DatasetError(path + ": HDF5 cannot open it (truncated or corrupt); expected a complete HDF5 file");
    }
    OutputsFile out;
    out.path = path;
    out.attrs = read_all_attrs(path, "/", f);
    const std::string schema = need(path, "/", out.attrs, "schema", AttrValue::Kind::string, "\"qattn-outputs/1\"").s;
    if (schema != "qattn-outputs/1") {
      fail(path, "/", "attribute 'schema' = \"" + schema + "\"; expected \"qattn-outputs/1\"" +
                          (schema.rfind("qattn-dump/", 0) == 0 ? " (this is a dump of inputs, not a file of outputs)" : ""));
    }
    out.kernel = need(path, "/", out.attrs, "kernel", AttrValue::Kind::string, "a string naming the kernel that made the outputs").s;
    if (out.kernel.empty()) fail(path, "/", "attribute 'kernel' is empty; expected the name of the kernel that made the outputs");
    if (out.attrs.count("recipe")) out.recipe = need(path, "/", out.attrs, "recipe", AttrValue::Kind::string, "a one-line recipe").s;
    if (!f.nameExists("layers") || f.childObjType("layers") != H5O_TYPE_GROUP) {
      fail(path, "/layers", "missing group; expected /layers/<L> groups holding o");
    }
    const H5::Group layers = f.openGroup("layers");
    std::vector<std::string> names;
    for (hsize_t i = 0; i < layers.getNumObjs(); ++i) names.push_back(layers.getObjnameByIdx(i));
    for (const std::string& name : names) need_utf8(path, "/layers", "the group name", name);
    if (names.empty()) fail(path, "/layers", "is empty; expected at least one layer");
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
      if (is_number(a) && is_number(b) && a.size() != b.size()) return a.size() < b.size();
      return a < b;
    });
    for (const std::string& name : names) out.layers.push_back(read_layer(path, layers, name, check));
    return out;
  }, false, "qattn-outputs/1");
}

OutputsFile read_outputs(const std::string& path, const OutputsShapeCheck& check) {
  if (!std::filesystem::exists(path)) throw DatasetError(path + ": no such file");
  if (!std::filesystem::is_regular_file(path)) throw DatasetError(path + ": not a regular file; expected an HDF5 file of schema qattn-outputs/1");
  // The whole read in the child: outputs files are a few arrays, and a corrupt one must not crash.
  read_first_in_child(path, [&] { (void)read_outputs_directly(path, check); }, "qattn-outputs/1");
  return read_outputs_directly(path, check);
}

void write_outputs(const std::string& path, const OutputsFile& out, FormatId dtype) {
  if (out.kernel.empty()) throw DatasetError(path + ": kernel: empty; expected the name of the kernel that made the outputs");
  std::map<std::string, AttrValue> root = out.attrs;
  root["kernel"] = attr(out.kernel);
  if (!out.recipe.empty()) root["recipe"] = attr(out.recipe);
  need_storable_attrs(path, "/", root);
  for (const LayerOutputs& l : out.layers) {
    need_group_name(path, "/layers", l.layer);
    if (l.context < 0) fail(path, "/layers/" + l.layer, "context " + std::to_string(l.context) + "; expected a positive token count (0: not stated)");
  }
  std::uint64_t payload = 0;
  for (const LayerOutputs& l : out.layers) payload += (dtype == FormatId::fp32 ? 4u : 2u) * l.o.size() + 4u * l.rows.size();
  write_atomically(path, dtype, payload, [&](H5::H5File& f) {
    std::map<std::string, AttrValue> attrs = out.attrs;
    attrs["schema"] = attr(std::string("qattn-outputs/1"));
    attrs["kernel"] = attr(out.kernel);
    if (!out.recipe.empty()) attrs["recipe"] = attr(out.recipe);
    for (const auto& [k, v] : attrs) put_attr(f, k, v);
    H5::Group lg = f.createGroup("layers");
    const Format fmt = format_of(dtype);
    for (const LayerOutputs& l : out.layers) {
      if (l.o.tokens != static_cast<int>(l.rows.size())) {
        throw DatasetError(path + ": /layers/" + l.layer + ": o has " + std::to_string(l.o.tokens) + " rows but " +
                           std::to_string(l.rows.size()) + " row indices were given; expected equal");
      }
      H5::Group g = lg.createGroup(l.layer);
      const hsize_t dims[3] = {static_cast<hsize_t>(l.o.heads), static_cast<hsize_t>(l.o.tokens), static_cast<hsize_t>(l.o.dim)};
      const H5::DataSpace sp(3, dims);
      if (dtype == FormatId::fp32) {
        g.createDataSet("o", H5::PredType::IEEE_F32LE, sp).write(l.o.data.data(), H5::PredType::NATIVE_FLOAT);
      } else {
        std::vector<std::uint16_t> raw(l.o.size());
        for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::uint16_t>(encode(fmt, l.o.data[i]));
        const H5::FloatType ht = half_type(dtype);
        g.createDataSet("o", ht, sp).write(raw.data(), ht);
      }
      if (l.rows_listed) {
        const hsize_t n = l.rows.size();
        const H5::DataSpace rs(1, &n);
        g.createDataSet("rows", H5::PredType::STD_I32LE, rs).write(l.rows.data(), H5::PredType::NATIVE_INT);
      }
      if (l.context > 0) put_attr(g, "context", attr(static_cast<long long>(l.context)));
    }
  }, [](const std::string& written) { (void)read_outputs(written); });
}

}  // namespace qattn
