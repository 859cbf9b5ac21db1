// engine: a move-only `void()` callable. Continuations carry promises and handles, which are
// move-only, so std::function (copyable) cannot hold them.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace axle {

/// Type-erased, move-only callable taking no arguments and returning nothing.
class UniqueFunction {
 public:
  UniqueFunction() noexcept = default;

  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, UniqueFunction> && std::is_invocable_v<F&>)
      UniqueFunction(F&& fn)  // NOLINT: implicit, like std::function
      : callable_(std::make_unique<Model<std::decay_t<F>>>(std::forward<F>(fn))) {}

  UniqueFunction(UniqueFunction&&) noexcept = default;
  UniqueFunction& operator=(UniqueFunction&&) noexcept = default;

  void operator()() { callable_->call(); }
  [[nodiscard]] explicit operator bool() const noexcept { return callable_ != nullptr; }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void call() = 0;
  };
  template <class F>
  struct Model final : Concept {
    explicit Model(F&& f) : fn(std::move(f)) {}
    explicit Model(const F& f) : fn(f) {}
    void call() override { fn(); }
    F fn;
  };
  std::unique_ptr<Concept> callable_;
};

}  // namespace axle
