#pragma once
// HDF5 helpers shared by the dump reader/writer and the outputs file (harness/io only): errors that
// name the file and the path inside it, attributes, the 16-bit float types.
#include <H5Cpp.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/io/dataset_file.hpp"
#include "harness/io/hdf5_probe.hpp"
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

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
// strings from a file go into JSON reports and Python, which both refuse anything else.
inline bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (n > 0 && i + static_cast<std::size_t>(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto x = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) return false;
    }
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

// s for a message: printable ASCII and valid UTF-8 as is, any other byte as \xNN.
inline std::string shown_text(const std::string& s) {
  if (valid_utf8(s)) return s;
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) out += ch;
    else out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }
  return out;
}

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
    case H5T_INTEGER:
      v.kind = AttrValue::Kind::integer;
      a.read(H5::PredType::NATIVE_LLONG, &v.i);
      break;
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


// Writes an HDF5 file through PATH.tmp.PID and a rename, so a crash never leaves a partial file
// under PATH; `fill` writes the contents into the open file. Checks that dtype is one the lab stores.
template <typename F>
void write_atomically(const std::string& path, FormatId dtype, F&& fill) {
  if (dtype != FormatId::fp16 && dtype != FormatId::bf16 && dtype != FormatId::fp32) {
    throw DatasetError(path + ": cannot write dtype " + std::string(name_of(dtype)) + "; expected fp16, bf16 or fp32");
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
    {
      H5::H5File f(tmp, H5F_ACC_TRUNC);
      fill(f);
    }
    std::filesystem::rename(tmp, path);
    guard.done = true;
    return 0;
  }, true);
}

}  // namespace qattn::h5
