#include "python/src/arrays.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "harness/system/memory.hpp"
#include "kernels/formats/codec.hpp"

namespace qattn::py {

namespace {

std::string shape_text(const AnyArray& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_text(const nb::dlpack::dtype& t) {
  const char* kind = t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)    ? "float"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)    ? "int"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)   ? "uint"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex) ? "complex"
                     : t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool)    ? "bool"
                                                                                             : "other";
  if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool)) return kind;
  return std::string(kind) + std::to_string(t.bits);
}

}  // namespace

AnyArray array_of(const ArrayArg& a, const std::string& name) {
  AnyArray out;
  if (nb::try_cast(a.obj, out)) return out;
  const std::string type = nb::cast<std::string>(nb::str(a.obj.type().attr("__name__")));
  if (nb::hasattr(a.obj, "dtype")) {
    const nb::object dt = a.obj.attr("dtype");
    const std::string order = nb::hasattr(dt, "byteorder") ? nb::cast<std::string>(dt.attr("byteorder")) : "";
    throw std::invalid_argument(name + ": " + type + " of dtype " + nb::cast<std::string>(nb::str(dt)) +
                                (order == ">" ? " (big-endian)" : "") +
                                "; expected float16, bfloat16, float32 or float64 in the machine's byte order (x.astype(np.float32))");
  }
  throw std::invalid_argument(name + ": a " + type + "; expected an array (NumPy, or a CPU tensor with DLPack)");
}

std::uint64_t element_count(const AnyArray& a, const std::string& name) {
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < a.ndim(); ++i) n = checked_product(name + ": shape " + shape_text(a), {n, static_cast<std::uint64_t>(a.shape(i))});
  return n;
}

namespace {

// Element i (in C order over the shape) of a strided array, as float64, exactly.
template <typename F>
void for_each_element(const AnyArray& a, const std::string& name, F&& f) {
  const nb::dlpack::dtype t = a.dtype();
  const auto code = static_cast<nb::dlpack::dtype_code>(t.code);
  const bool f16 = code == nb::dlpack::dtype_code::Float && t.bits == 16, bf16 = code == nb::dlpack::dtype_code::Bfloat && t.bits == 16,
             f32 = code == nb::dlpack::dtype_code::Float && t.bits == 32, f64 = code == nb::dlpack::dtype_code::Float && t.bits == 64;
  if (t.lanes != 1 || !(f16 || bf16 || f32 || f64)) {
    throw std::invalid_argument(name + ": dtype " + dtype_text(t) + "; expected float16, bfloat16, float32 or float64");
  }
  const std::size_t nd = a.ndim();
  const std::size_t total = element_count(a, name);
  const auto* base = static_cast<const std::uint8_t*>(a.data());
  const std::size_t bytes = t.bits / 8;
  std::vector<std::size_t> idx(nd, 0);
  for (std::size_t n = 0; n < total; ++n) {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < nd; ++i) off += static_cast<std::int64_t>(idx[i]) * a.stride(i);
    const std::uint8_t* p = base + off * static_cast<std::int64_t>(bytes);
    double x;
    if (f16 || bf16) {
      std::uint16_t raw;
      std::memcpy(&raw, p, 2);
      x = decode(format_of(f16 ? FormatId::fp16 : FormatId::bf16), raw);
    } else if (f32) {
      float v;
      std::memcpy(&v, p, 4);
      x = v;
    } else {
      std::memcpy(&x, p, 8);
    }
    f(n, x, f64);
    for (std::size_t i = nd; i-- > 0;) {
      if (++idx[i] < a.shape(i)) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

void check_tensor_shape(const AnyArray& a, const std::string& name) {
  if (a.ndim() != 3) throw std::invalid_argument(name + ": shape " + shape_text(a) + "; expected rank 3 [heads, tokens, dim]");
  for (std::size_t i = 0; i < 3; ++i) {
    if (a.shape(i) == 0) throw std::invalid_argument(name + ": shape " + shape_text(a) + " has an empty dimension");
    if (a.shape(i) > static_cast<std::size_t>(kMaxDimension)) {
      throw std::invalid_argument(name + ": shape " + shape_text(a) + ": dimension " + std::to_string(i) + " is larger than " +
                                  std::to_string(kMaxDimension) + "; expected [heads, tokens, dim] each at most that");
    }
  }
}

TensorF to_tensor(const AnyArray& a, const std::string& name) {
  check_tensor_shape(a, name);
  require_memory(name + " " + shape_text(a) + " as float32", checked_product(name, {4, element_count(a, name)}));
  TensorF t(static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)), static_cast<int>(a.shape(2)));
  for_each_element(a, name, [&](std::size_t n, double x, bool from_f64) {
    const auto f = static_cast<float>(x);
    if (from_f64 && !(static_cast<double>(f) == x) && !std::isnan(x)) {
      const std::size_t c = n % t.dim, tok = (n / t.dim) % t.tokens, h = n / (static_cast<std::size_t>(t.dim) * t.tokens);
      throw std::invalid_argument(name + "[" + std::to_string(h) + ", " + std::to_string(tok) + ", " + std::to_string(c) +
                                  "]: float64 value is not exactly a float32; pass float32 (or float16/bfloat16) arrays, rounded as you intend");
    }
    t.data[n] = f;
  });
  return t;
}

std::vector<double> to_doubles(const AnyArray& a, const std::string& name, std::vector<std::size_t>* shape) {
  const std::uint64_t total = element_count(a, name);
  require_memory(name + " " + shape_text(a) + " as float64", checked_product(name, {8, total}));
  std::vector<double> out(total);
  for_each_element(a, name, [&](std::size_t n, double x, bool) { out[n] = x; });
  if (shape) {
    shape->clear();
    for (std::size_t i = 0; i < a.ndim(); ++i) shape->push_back(a.shape(i));
  }
  return out;
}

std::vector<int> to_ints(const AnyArray& a, const std::string& name) {
  const nb::dlpack::dtype t = a.dtype();
  const auto code = static_cast<nb::dlpack::dtype_code>(t.code);
  if (a.ndim() != 1) throw std::invalid_argument(name + ": shape " + shape_text(a) + "; expected a 1-D array of row indices");
  if (t.lanes != 1 || !(code == nb::dlpack::dtype_code::Int || code == nb::dlpack::dtype_code::UInt) || (t.bits != 32 && t.bits != 64)) {
    throw std::invalid_argument(name + ": dtype " + dtype_text(t) + "; expected int32 or int64 row indices");
  }
  require_memory(name + " " + shape_text(a), checked_product(name, {4, element_count(a, name)}));
  std::vector<int> out(a.shape(0));
  const auto* base = static_cast<const std::uint8_t*>(a.data());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint8_t* p = base + static_cast<std::int64_t>(i) * a.stride(0) * (t.bits / 8);
    std::int64_t v;
    if (t.bits == 32) {
      std::int32_t x;
      std::memcpy(&x, p, 4);
      v = code == nb::dlpack::dtype_code::UInt ? static_cast<std::int64_t>(static_cast<std::uint32_t>(x)) : x;
    } else {
      std::memcpy(&v, p, 8);
    }
    if (v < 0 || v > 2147483647LL) throw std::invalid_argument(name + "[" + std::to_string(i) + "] = " + std::to_string(v) + "; expected a row index >= 0");
    out[i] = static_cast<int>(v);
  }
  return out;
}

}  // namespace qattn::py
