#pragma once
// NumPy / DLPack arrays <-> the lab's tensors. Inputs of float16, bfloat16 or float32 are taken
// exactly; float64 only when every element is exactly a float32 (the lab's tensors are float32, and
// a silent rounding of a user's data would be a wrong answer). Outputs hand over the C++ buffer
// without a copy (the array owns it). Every size is checked before its buffer is allocated: a
// view with stride 0 costs NumPy nothing and can describe more memory than the machine has.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats/tensor.hpp"

namespace qattn::py {

namespace nb = nanobind;

using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

// An array argument as the user gave it: any Python object, converted by array_of() with an error
// naming the argument (an object, str or big-endian array would otherwise fail nanobind's overload
// resolution with a generic TypeError). Shown in signatures and stubs as numpy.typing.ArrayLike.
struct ArrayArg {
  nb::object obj;
};

AnyArray array_of(const ArrayArg& a, const std::string& name);

// The lab's tensors index heads, tokens and channels with int.
constexpr int kMaxDimension = 2147483647;

// The number of elements of a (overflow-checked: a stride-0 view can describe more than 2^64).
std::uint64_t element_count(const AnyArray& a, const std::string& name);

// Throws unless a is [heads, tokens, dim] with every dimension in 1..kMaxDimension.
void check_tensor_shape(const AnyArray& a, const std::string& name);
// A [heads, tokens, dim] float tensor from any CPU array of rank 3 (any strides).
TensorF to_tensor(const AnyArray& a, const std::string& name);
inline TensorF to_tensor(const ArrayArg& a, const std::string& name) { return to_tensor(array_of(a, name), name); }
// Any-rank float array flattened to float64 (float16/bfloat16/float32/float64 are exact).
std::vector<double> to_doubles(const AnyArray& a, const std::string& name, std::vector<std::size_t>* shape = nullptr);
inline std::vector<double> to_doubles(const ArrayArg& a, const std::string& name, std::vector<std::size_t>* shape = nullptr) {
  return to_doubles(array_of(a, name), name, shape);
}
std::vector<int> to_ints(const AnyArray& a, const std::string& name);

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::vector<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner);
}

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(Tensor3<T>&& t) {
  const std::vector<std::size_t> shape{static_cast<std::size_t>(t.heads), static_cast<std::size_t>(t.tokens), static_cast<std::size_t>(t.dim)};
  return to_numpy(std::move(t.data), shape);
}

}  // namespace qattn::py

namespace nanobind::detail {

template <>
struct type_caster<qattn::py::ArrayArg> {
  NB_TYPE_CASTER(qattn::py::ArrayArg, const_name("numpy.typing.ArrayLike"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    value.obj = borrow(src);
    return true;
  }
  static handle from_cpp(const qattn::py::ArrayArg& v, rv_policy, cleanup_list*) noexcept { return v.obj.inc_ref(); }
};

}  // namespace nanobind::detail
