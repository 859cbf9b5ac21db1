// engine: a vector that keeps its first N elements inline. IR nodes hold a few operands and
// attributes each; inline storage keeps tracing an op free of extra allocations.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

namespace axle {

/// Sequence of T with the first N elements stored inline (T must be default-constructible).
template <class T, std::size_t N>
class SmallVector {
 public:
  SmallVector() = default;
  SmallVector(std::initializer_list<T> items) {
    for (const T& item : items) push_back(item);
  }
  explicit SmallVector(std::span<const T> items) {
    for (const T& item : items) push_back(item);
  }

  void push_back(T value) {
    if (size_ < N) {
      inline_[size_] = std::move(value);
    } else {
      if (size_ == N) {
        heap_.reserve(2 * N);
        for (auto& v : inline_) heap_.push_back(std::move(v));
      }
      heap_.push_back(std::move(value));
    }
    ++size_;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T* data() noexcept { return size_ <= N ? inline_.data() : heap_.data(); }
  [[nodiscard]] const T* data() const noexcept {
    return size_ <= N ? inline_.data() : heap_.data();
  }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data(), size_}; }
  /// Moves every element out (leaves the vector empty).
  std::vector<T> take() {
    std::vector<T> out(std::make_move_iterator(begin()), std::make_move_iterator(end()));
    clear();
    return out;
  }
  void clear() {
    for (std::size_t i = 0; i < std::min<std::size_t>(size_, N); ++i) inline_[i] = T{};
    heap_.clear();
    size_ = 0;
  }

 private:
  // The size first, then the inline elements: a reader of a short vector touches one cache line.
  uint32_t size_ = 0;
  std::array<T, N> inline_{};
  std::vector<T> heap_;
};

}  // namespace axle
