// graph/ops: libtorch's Tensor methods, each the free function of its name (graph/ops.h). Inside
// Tensor's scope a method hides the function it calls, hence axle::.
#include <fmt/format.h>

#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"
#include "axle/graph/tensor.h"

namespace axle {

Tensor Tensor::to(DType dtype, std::source_location where) const {
  return dtype == this->dtype() ? *this : axle::cast(*this, dtype, where);
}
Tensor Tensor::mm(const Tensor& other, std::source_location where) const {
  return axle::mm(*this, other, where);
}
Tensor Tensor::matmul(const Tensor& other, std::source_location where) const {
  return axle::matmul(*this, other, where);
}
Tensor Tensor::t(std::source_location where) const {
  if (dim() > 2) {
    ops::fail("t",
              fmt::format("{} has {} dims; t() takes at most 2 (transpose takes more)",
                          ops::describe(*this), dim()),
              where);
  }
  return dim() < 2 ? *this : axle::transpose(*this, 0, 1, where);
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1, std::source_location where) const {
  return axle::transpose(*this, dim0, dim1, where);
}
Tensor Tensor::permute(std::vector<int64_t> dims, std::source_location where) const {
  return axle::permute(*this, std::move(dims), where);
}
Tensor Tensor::reshape(std::vector<int64_t> shape, std::source_location where) const {
  return axle::reshape(*this, std::move(shape), where);
}
Tensor Tensor::view(std::vector<int64_t> shape, std::source_location where) const {
  return axle::view(*this, std::move(shape), where);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim, std::source_location where) const {
  return axle::flatten(*this, start_dim, end_dim, where);
}
Tensor Tensor::unsqueeze(int64_t dim, std::source_location where) const {
  return axle::unsqueeze(*this, dim, where);
}
Tensor Tensor::squeeze(int64_t dim, std::source_location where) const {
  return axle::squeeze(*this, dim, where);
}
Tensor Tensor::sum(std::vector<int64_t> dims, bool keepdim, std::source_location where) const {
  return axle::sum(*this, std::move(dims), keepdim, where);
}
Tensor Tensor::mean(std::vector<int64_t> dims, bool keepdim, std::source_location where) const {
  return axle::mean(*this, std::move(dims), keepdim, where);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim, std::source_location where) const {
  return axle::argmax(*this, dim, keepdim, where);
}

Tensor Tensor::amax(std::vector<int64_t> dims, bool keepdim, std::source_location where) const {
  return axle::amax(*this, std::move(dims), keepdim, where);
}
Tensor Tensor::amin(std::vector<int64_t> dims, bool keepdim, std::source_location where) const {
  return axle::amin(*this, std::move(dims), keepdim, where);
}
Tensor Tensor::softmax(int64_t dim, std::source_location where) const {
  return axle::softmax(*this, dim, where);
}
Tensor Tensor::log_softmax(int64_t dim, std::source_location where) const {
  return axle::log_softmax(*this, dim, where);
}
Tensor Tensor::exp(std::source_location where) const { return axle::exp(*this, where); }
Tensor Tensor::log(std::source_location where) const { return axle::log(*this, where); }
Tensor Tensor::sqrt(std::source_location where) const { return axle::sqrt(*this, where); }
Tensor Tensor::abs(std::source_location where) const { return axle::abs(*this, where); }
Tensor Tensor::neg(std::source_location where) const { return axle::neg(*this, where); }
Tensor Tensor::relu(std::source_location where) const { return axle::relu(*this, where); }
Tensor Tensor::sigmoid(std::source_location where) const { return axle::sigmoid(*this, where); }
Tensor Tensor::tanh(std::source_location where) const { return axle::tanh(*this, where); }
Tensor Tensor::pow(double exponent, std::source_location where) const {
  return axle::pow(*this, exponent, where);
}
Tensor Tensor::pow_integer(int64_t exponent, std::source_location where) const {
  return axle::pow(*this, exponent, where);
}
Tensor Tensor::eq(const Tensor& other, std::source_location where) const {
  return axle::eq(*this, other, where);
}

}  // namespace axle
