// engine: tensor shapes. Fixed capacity, no heap: tracing an op builds several shapes, and an
// allocation each would cost more than the rest of the op.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>

namespace axle {

/// Dimensions of a tensor, outermost first; rank 0 is a scalar. At most kMaxRank dimensions.
class Shape {
 public:
  /// The most dims a shape may have.
  static constexpr int kMaxRank = 8;

  /// A scalar's shape: rank 0.
  Shape() noexcept = default;
  /// The dims `dims`, outermost first: Shape{2, 3}. Throws std::length_error past kMaxRank.
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  /// As above, from a span.
  explicit Shape(std::span<const int64_t> dims) { assign(dims.data(), dims.size()); }

  /// The number of dims.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// Size of dim `i`, 0 <= i < rank() (unchecked).
  [[nodiscard]] int64_t operator[](int i) const noexcept { return dims_[i]; }
  /// As above, assignable.
  [[nodiscard]] int64_t& operator[](int i) noexcept { return dims_[i]; }
  /// The dims, as a span.
  [[nodiscard]] std::span<const int64_t> dims() const noexcept { return {dims_.data(), rank_}; }
  /// The number of elements: the product of the dims (1 for a scalar).
  [[nodiscard]] int64_t numel() const noexcept {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  /// Appends a dim of size `d`; throws std::length_error past kMaxRank.
  void push_back(int64_t d) {
    if (rank_ == kMaxRank) throw std::length_error("axle supports tensors of rank at most 8");
    dims_[rank_++] = d;
  }
  /// Whether `a` and `b` have the same dims.
  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i) {
      if (a.dims_[i] != b.dims_[i]) return false;
    }
    return true;
  }

  /// "[2,3]"; "[]" for a scalar.
  [[nodiscard]] std::string to_string() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ',';
      s += std::to_string(dims_[i]);
    }
    return s + "]";
  }

 private:
  void assign(const int64_t* dims, std::size_t n) {
    if (n > kMaxRank) throw std::length_error("axle supports tensors of rank at most 8");
    for (std::size_t i = 0; i < n; ++i) dims_[i] = dims[i];
    rank_ = static_cast<uint8_t>(n);
  }
  std::array<int64_t, kMaxRank> dims_{};
  uint8_t rank_ = 0;
};

/// Row-major (C order) strides of `shape`, in elements.
inline std::array<int64_t, Shape::kMaxRank> contiguous_strides(const Shape& shape) noexcept {
  std::array<int64_t, Shape::kMaxRank> strides{};
  int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

}  // namespace axle
