#pragma once
// A dense [heads, tokens, dim] array: the shape of Q, K, V and the output throughout the lab.
#include <cstddef>
#include <string>
#include <vector>

namespace qattn {

template <typename T>
struct Tensor3 {
  int heads = 0, tokens = 0, dim = 0;
  std::vector<T> data;

  Tensor3() = default;
  Tensor3(int h, int n, int d) : heads(h), tokens(n), dim(d), data(static_cast<std::size_t>(h) * n * d) {}

  std::size_t index(int h, int n, int c) const {
    return (static_cast<std::size_t>(h) * tokens + n) * dim + c;
  }
  T& operator()(int h, int n, int c) { return data[index(h, n, c)]; }
  const T& operator()(int h, int n, int c) const { return data[index(h, n, c)]; }
  const T* row(int h, int n) const { return data.data() + index(h, n, 0); }
  T* row(int h, int n) { return data.data() + index(h, n, 0); }
  std::size_t size() const { return data.size(); }
  std::string shape_string() const {
    std::string s = "[";
    s += std::to_string(heads);
    s += ", ";
    s += std::to_string(tokens);
    s += ", ";
    s += std::to_string(dim);
    s += "]";
    return s;
  }
};

using TensorF = Tensor3<float>;
using TensorD = Tensor3<double>;

}  // namespace qattn
