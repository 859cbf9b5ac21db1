// graph: reverse-mode autograd over lazy tensors, as libtorch has it. A tensor's own switches
// (requires_grad_, grad, set_grad, is_leaf, detach, backward) are members of Tensor
// (graph/tensor.h); this header holds grad mode and its guards. backward() only traces: the
// gradients it produces are pending IR in the same lazy graph as the forward pass, executed by
// the next mark_step or value access like any other tensor.
#pragma once

#include <string_view>

#include "graph/tensor.h"
#include "graph/trace_context.h"

namespace axle {

/// Whether ops on this thread record what backward() needs (on by default, per replica: it is
/// part of the thread's TraceContext).
class GradMode {
 public:
  [[nodiscard]] static bool is_enabled() noexcept {
    const TraceContext* context = TraceContext::current_if_any();
    return context == nullptr || context->grad_enabled();
  }
  static void set_enabled(bool enabled) { TraceContext::current().set_grad_enabled(enabled); }
};

/// Sets grad mode to `enabled` for its scope, then restores the previous mode (at::AutoGradMode).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

/// Turns recording off on this thread for its scope (torch::NoGradGuard): ops inside give
/// results that do not require grad, as for evaluation or optimizer updates.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

namespace autograd {

/// The name of the backward function that produced `t` ("MulBackward"), or "" for a leaf or a
/// tensor that does not require grad.
[[nodiscard]] std::string_view grad_fn_name(const Tensor& t);

}  // namespace autograd
}  // namespace axle
