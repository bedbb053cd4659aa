#pragma once
// HDF5 helpers shared by the dump reader/writer and the outputs file (harness/io only): errors that
// name the file and the path inside it, attributes, the 16-bit float types.
#include <H5Cpp.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/io/dataset_file.hpp"
#include "harness/io/hdf5_probe.hpp"
#include "harness/system/memory.hpp"
#include "harness/io/text.hpp"
#include "kernels/formats/format.hpp"

namespace qattn::h5 {

[[noreturn]] inline void fail(const std::string& file, const std::string& where, const std::string& what) {
  throw DatasetError(file + ": " + where + ": " + what);
}

inline std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

inline bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ---- text ----

// Throws naming the file, where, and what the text is when it is not UTF-8.
inline void need_utf8(const std::string& file, const std::string& where, const std::string& what, const std::string& s) {
  if (!valid_utf8(s)) fail(file, where, what + " \"" + shown_text(s) + "\" is not valid UTF-8; expected UTF-8 text");
}

// ---- attributes ----

inline AttrValue read_attr(const std::string& file, const std::string& where, const H5::H5Object& obj,
                    const std::string& name) {
  const H5::Attribute a = obj.openAttribute(name);
  const H5::DataSpace space = a.getSpace();
  if (space.getSimpleExtentNpoints() != 1) fail(file, where + " attribute '" + name + "'", "expected a scalar");
  AttrValue v;
  switch (a.getTypeClass()) {
    case H5T_STRING: {
      v.kind = AttrValue::Kind::string;
      a.read(a.getStrType(), v.s);
      v.s.erase(std::find(v.s.begin(), v.s.end(), '\0'), v.s.end());
      need_utf8(file, where, "attribute '" + shown_text(name) + "' =", v.s);
      break;
    }
    case H5T_INTEGER: {
      v.kind = AttrValue::Kind::integer;
      // An unsigned 64-bit value past the signed range would be clamped by HDF5's conversion and
      // shown as 9223372036854775807: it is read as itself and refused as itself.
      if (a.getIntType().getSign() == H5T_SGN_NONE && a.getIntType().getSize() >= 8) {
        unsigned long long u = 0;
        a.read(H5::PredType::NATIVE_ULLONG, &u);
        if (u > 9223372036854775807ULL) {
          fail(file, where, "attribute '" + shown_text(name) + "' = " + std::to_string(u) + "; expected an integer at most 9223372036854775807");
        }
        v.i = static_cast<long long>(u);
      } else {
        a.read(H5::PredType::NATIVE_LLONG, &v.i);
      }
      break;
    }
    case H5T_FLOAT:
      v.kind = AttrValue::Kind::real;
      a.read(H5::PredType::NATIVE_DOUBLE, &v.d);
      break;
    default: fail(file, where + " attribute '" + name + "'", "unsupported type; expected a string, integer or float");
  }
  return v;
}

inline std::map<std::string, AttrValue> read_all_attrs(const std::string& file, const std::string& where,
                                                const H5::H5Object& obj) {
  std::map<std::string, AttrValue> out;
  const int n = obj.getNumAttrs();
  for (int i = 0; i < n; ++i) {
    const std::string name = obj.openAttribute(static_cast<unsigned>(i)).getName();
    need_utf8(file, where, "an attribute's name", name);
    out[name] = read_attr(file, where, obj, name);
  }
  return out;
}

inline const AttrValue& need(const std::string& file, const std::string& where, const std::map<std::string, AttrValue>& attrs,
                      const std::string& name, AttrValue::Kind kind, const std::string& expected) {
  const auto it = attrs.find(name);
  if (it == attrs.end()) fail(file, where, "attribute '" + name + "' is missing; expected " + expected);
  const bool ok = it->second.kind == kind || (kind == AttrValue::Kind::real && it->second.kind == AttrValue::Kind::integer);
  if (!ok) fail(file, where, "attribute '" + name + "' = " + it->second.text() + " has the wrong type; expected " + expected);
  return it->second;
}

inline double as_real(const AttrValue& v) { return v.kind == AttrValue::Kind::integer ? static_cast<double>(v.i) : v.d; }

// ---- element types ----

inline std::optional<FormatId> float_dtype(const H5::DataSet& ds) {
  if (ds.getTypeClass() != H5T_FLOAT) return std::nullopt;
  const H5::FloatType t = ds.getFloatType();
  std::size_t spos, epos, esize, mpos, msize;
  t.getFields(spos, epos, esize, mpos, msize);
  const std::size_t size = t.getSize();
  if (size == 2 && esize == 5 && msize == 10 && mpos == 0 && epos == 10 && spos == 15 && t.getEbias() == 15) return FormatId::fp16;
  if (size == 2 && esize == 8 && msize == 7 && mpos == 0 && epos == 7 && spos == 15 && t.getEbias() == 127) return FormatId::bf16;
  if (size == 4 && esize == 8 && msize == 23 && mpos == 0 && epos == 23 && spos == 31 && t.getEbias() == 127) return FormatId::fp32;
  return std::nullopt;
}

inline std::string type_text(const H5::DataSet& ds) {
  switch (ds.getTypeClass()) {
    case H5T_INTEGER: return "integer (" + std::to_string(ds.getDataType().getSize()) + " bytes)";
    case H5T_FLOAT: return "float (" + std::to_string(ds.getDataType().getSize()) + " bytes)";
    case H5T_STRING: return "string";
    default: return "non-numeric";
  }
}

// The on-disk 16-bit float type of a format, little endian.
inline H5::FloatType half_type(FormatId id) {
  const Format f = format_of(id);
  H5::FloatType t(H5::PredType::IEEE_F32LE);
  // Fields first (they fit in 16 bits), then shrink: HDF5 checks the fields against the size.
  t.setFields(15, static_cast<std::size_t>(f.man_bits), static_cast<std::size_t>(f.exp_bits), 0,
              static_cast<std::size_t>(f.man_bits));
  t.setOffset(0);
  t.setPrecision(16);
  t.setSize(2);
  t.setEbias(static_cast<std::size_t>(f.bias));
  return t;
}

inline void put_attr(H5::H5Object& obj, const std::string& name, const AttrValue& v) {
  const H5::DataSpace scalar(H5S_SCALAR);
  switch (v.kind) {
    case AttrValue::Kind::string: {
      const H5::StrType st(H5::PredType::C_S1, H5T_VARIABLE);
      obj.createAttribute(name, st, scalar).write(st, v.s);
      break;
    }
    case AttrValue::Kind::integer:
      obj.createAttribute(name, H5::PredType::STD_I64LE, scalar).write(H5::PredType::NATIVE_LLONG, &v.i);
      break;
    case AttrValue::Kind::real:
      obj.createAttribute(name, H5::PredType::IEEE_F64LE, scalar).write(H5::PredType::NATIVE_DOUBLE, &v.d);
      break;
  }
}

// HDF5 failures as one error naming the file. The library's own words name its internal calls
// (H5Aopen_by_idx failed), which tell a user nothing they can act on, so the message says what
// the failure means for this file instead. `expected` names the schema the file was read as.
template <typename F>
auto with_hdf5_errors(const std::string& file, F&& f, bool writing = false, const char* expected = "qattn-dump/1") {
  const auto lock = hdf5_lock();
  H5::Exception::dontPrint();
  try {
    return f();
  } catch (const H5::Exception&) {
    if (writing) throw DatasetError(file + ": HDF5 cannot write it (is the folder writable and the disk not full?)");
    throw DatasetError(file + ": the HDF5 library cannot read part of it (corrupt, locked by a writer, or compressed with a filter this "
                       "libhdf5 lacks); expected an intact file of schema " + std::string(expected));
  }
}


// A group name a writer may create: the readers list a file's groups, so a name that is empty, "."
// or "..", holds a '/' (HDF5 would make a path of it), a NUL (HDF5 would cut it) or is not UTF-8
// would be read back as something else or refused.
inline void need_group_name(const std::string& file, const std::string& parent, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos ||
      !valid_utf8(name)) {
    fail(file, parent + "/" + shown_text(name), "name \"" + shown_text(name) + "\"; expected a non-empty UTF-8 name without '/' or NUL (not . or ..)");
  }
}

// String attributes are stored as C strings: a NUL would cut the value short without a word.
inline void need_storable_attrs(const std::string& file, const std::string& where, const std::map<std::string, AttrValue>& attrs) {
  for (const auto& [k, v] : attrs) {
    if (k.empty() || k.find('\0') != std::string::npos || !valid_utf8(k)) {
      fail(file, where, "attribute name \"" + shown_text(k) + "\"; expected a non-empty UTF-8 name without NUL");
    }
    if (v.kind == AttrValue::Kind::string && (v.s.find('\0') != std::string::npos || !valid_utf8(v.s))) {
      fail(file, where, "attribute '" + k + "' = " + shown_text(v.s) + "; expected UTF-8 text without NUL bytes");
    }
  }
}

// Writes an HDF5 file through PATH.tmp.PID and a rename, so a crash never leaves a partial file
// under PATH; `fill` writes the contents into the open file. Checks that dtype is one the lab stores.
// Before the rename the written file is read back by `reader` (the schema's own reader): a writer
// never leaves a file its reader refuses, and its rules are written once.
// `payload` is the bytes of the arrays `fill` writes: with a MiB for HDF5's own structures, checked
// against the disk's free space and the file-size limit before the file is opened (require_disk).
template <typename F, typename R>
void write_atomically(const std::string& path, FormatId dtype, std::uint64_t payload, F&& fill, R&& reader) {
  if (dtype != FormatId::fp16 && dtype != FormatId::bf16 && dtype != FormatId::fp32) {
    throw DatasetError(path + ": cannot write dtype " + std::string(name_of(dtype)) + "; expected fp16, bf16 or fp32");
  }
  try {
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    require_disk(path, folder.empty() ? std::string(".") : folder.string(), checked_sum(path, {payload, std::uint64_t{1} << 20}));
  } catch (const std::invalid_argument& e) {
    throw DatasetError(std::string("not written: ") + e.what());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  struct RemoveOnFailure {
    const std::string& file;
    bool done = false;
    ~RemoveOnFailure() {
      std::error_code ec;
      if (!done) std::filesystem::remove(file, ec);
    }
  } guard{tmp};
  with_hdf5_errors(path, [&] {
    H5::H5File f(tmp, H5F_ACC_TRUNC);
    fill(f);
    return 0;
  }, true);
  try {
    reader(tmp);
  } catch (const DatasetError& e) {
    std::string msg = e.what();
    for (std::size_t at = msg.find(tmp); at != std::string::npos; at = msg.find(tmp, at + path.size())) msg.replace(at, tmp.size(), path);
    throw DatasetError("not written: " + msg);
  }
  std::filesystem::rename(tmp, path);
  guard.done = true;
}

}  // namespace qattn::h5
