// graph: reverse-mode autograd over lazy tensors, as libtorch has it. A tensor's own switches
// (requires_grad_, grad, set_grad, is_leaf, detach, backward) are members of Tensor
// (graph/tensor.h); this header holds grad mode and its guards. backward() only traces: the
// gradients it produces are pending IR in the same lazy graph as the forward pass, executed by
// the next mark_step or value access like any other tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <source_location>
#include <string_view>

#include "axle/graph/tensor.h"
#include "axle/graph/trace_context.h"

namespace axle {

/// Whether ops on this thread record what backward() needs (on by default, per replica: it is
/// part of the thread's TraceContext).
class GradMode {
 public:
  /// Whether grad mode is on on this thread, as at::GradMode::is_enabled().
  [[nodiscard]] static bool is_enabled() noexcept {
    const TraceContext* context = TraceContext::current_if_any();
    return context == nullptr || context->grad_enabled();
  }
  /// Turns grad mode on or off on this thread, as at::GradMode::set_enabled(); AutoGradMode is
  /// the scoped form.
  static void set_enabled(bool enabled) { TraceContext::current().set_grad_enabled(enabled); }
};

/// Sets grad mode to `enabled` for its scope, then restores the previous mode (at::AutoGradMode).
class AutoGradMode {
 public:
  /// Sets grad mode to `enabled`, remembering the previous mode.
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  /// Restores the previous mode.
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
  /// Turns grad mode off until the scope ends.
  NoGradGuard() : AutoGradMode(false) {}
};

namespace autograd {

/// The name of the backward function that produced `t` ("MulBackward"), or "" for a leaf or a
/// tensor that does not require grad.
[[nodiscard]] std::string_view grad_fn_name(const Tensor& t);

/// A function of a leaf, run by backward() once it has added the leaf's gradient of that
/// backward to the leaf's grad(): the leaf's grad() is then final for this backward.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

/// Registers `hook` on `leaf` (a tensor that requires grad and has no grad_fn), as torch's
/// Tensor.register_post_accumulate_grad_hook: each backward() runs it on the replica's thread as
/// soon as every path from the root to the leaf has been walked, so what it traces (a gradient
/// all-reduce, say) enters the graph right after the leaf's last gradient op. Hooks run in
/// registration order; one that throws ends the backward() with its exception. Returns a handle
/// for remove_post_accumulate_grad_hook.
std::size_t register_post_accumulate_grad_hook(
    const Tensor& leaf, PostAccumulateGradHook hook,
    std::source_location where = std::source_location::current());
/// Removes the hook `handle` from `leaf`; a handle it does not hold is ignored.
void remove_post_accumulate_grad_hook(const Tensor& leaf, std::size_t handle) noexcept;

/// Runs `callback` when the backward() in progress on this thread has walked its whole graph and
/// run every leaf's hooks, as torch's Variable._execution_engine.queue_callback; callbacks run in
/// the order queued, and one may queue another. Only from inside a backward() (a hook): anywhere
/// else it throws std::logic_error.
void queue_callback(std::function<void()> callback,
                    std::source_location where = std::source_location::current());

}  // namespace autograd
}  // namespace axle
