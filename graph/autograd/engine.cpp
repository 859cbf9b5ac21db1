// graph/autograd: backward() — walks the recorded graph from a tensor to its leaves and traces
// the gradients into the lazy graph. It executes nothing. The walk is iterative (graphs may be a
// million ops deep) and visits the graph in the same order every time, so a training step's
// gradient graph, and with it the compiled program's hash, is the same every step.
#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "axle/engine/this_thread.h"
#include "axle/graph/autograd.h"
#include "axle/graph/autograd/function.h"
#include "axle/graph/autograd/grad_util.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

// A gradient handed to a leaf gets a handle of its own, so that replacing or updating the
// leaf's grad never shows through a tensor someone else holds (the caller's `gradient`, say).
Tensor own_handle(const Tensor& t) {
  if (t.impl()->use_count() == 1) return t;
  return t.detach();
}

// Adds `grad` to what `slot` holds (undefined: nothing yet).
void accumulate(Tensor& slot, Tensor grad) {
  slot = slot.defined() ? add(slot, grad) : std::move(grad);
}

// Brings an input's gradient to the input's shape and dtype (formulas may leave it in the
// result's broadcast shape and dtype).
Tensor fit_to_input(Tensor grad, const Tensor& input) {
  if (!(grad.shape() == input.shape())) grad = autograd::sum_to(grad, input.shape());
  if (grad.dtype() != input.dtype()) grad = cast(grad, input.dtype());
  return grad;
}

// The callbacks queued by the backward() running on this thread (autograd::queue_callback); the
// thread is bound to them through ThisThread<BackwardCallbacks> while it runs.
struct BackwardCallbacks {
  std::vector<std::function<void()>> queued;
};

// Makes `callbacks` the queue of the backward() this scope runs, restoring the outer one's.
class CallbackQueueScope {
 public:
  explicit CallbackQueueScope(BackwardCallbacks& callbacks)
      : previous_(ThisThread<BackwardCallbacks>::bind(&callbacks)) {}
  ~CallbackQueueScope() { ThisThread<BackwardCallbacks>::bind(previous_); }
  CallbackQueueScope(const CallbackQueueScope&) = delete;
  CallbackQueueScope& operator=(const CallbackQueueScope&) = delete;

 private:
  BackwardCallbacks* previous_;
};

struct PendingFn {
  int64_t dependencies = 0;  // edges from GradFns not yet run
  Tensor grad;               // the sum of the gradients they sent so far
};

class Backward {
 public:
  Backward(bool retain_graph, const Loc& where) : retain_graph_(retain_graph), where_(where) {}

  /// Sends gradients to `targets` (autograd::gradients_at) instead of leaves' grad().
  void capture(std::span<const GradEdge> targets) {
    capturing_ = true;
    captured_.clear();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      captured_.push_back(Tensor());
      const void* key = targets[i].fn ? static_cast<const void*>(targets[i].fn.get())
                                      : static_cast<const void*>(targets[i].leaf.get());
      if (key) target_index_.try_emplace(key, i);
    }
  }
  [[nodiscard]] autograd::GradList take_captured() { return std::move(captured_); }

  void run(GradFn* root, Tensor root_grad) {
    count_dependencies(root);
    pending_[root].grad = std::move(root_grad);
    std::vector<GradFn*> ready{root};
    while (!ready.empty()) {
      GradFn* fn = ready.back();
      ready.pop_back();
      Tensor grad = std::move(pending_[fn].grad);
      autograd::GradList grads;
      // No gradient reached this function (every path to it was cut): it only passes the
      // dependency counts on.
      if (grad.defined()) grads = apply(*fn, grad);
      const std::span<const GradEdge> edges = fn->edges();
      for (std::size_t i = 0; i < edges.size(); ++i) {
        const bool has_grad = i < grads.size() && grads[i].defined();
        if (capturing_ && edges[i].defined()) {
          const void* key = edges[i].fn ? static_cast<const void*>(edges[i].fn.get())
                                        : static_cast<const void*>(edges[i].leaf.get());
          const auto target = target_index_.find(key);
          if (target != target_index_.end()) {
            if (has_grad) accumulate(captured_[target->second], std::move(grads[i]));
            continue;
          }
        }
        if (GradFn* next = edges[i].fn.get()) {
          PendingFn& p = pending_[next];
          if (has_grad) accumulate(p.grad, std::move(grads[i]));
          if (--p.dependencies == 0) ready.push_back(next);
        } else if (edges[i].leaf && !capturing_) {
          TensorImpl* leaf = edges[i].leaf.get();
          if (has_grad) add_to_leaf(leaf, std::move(grads[i]));
          // Every path to the leaf walked: its gradient of this backward is complete.
          if (--leaf_dependencies_[leaf] == 0) finish_leaf(leaf);
        }
      }
      if (!retain_graph_) fn->release_saved();
    }
    flush_leaves();
  }

  void add_to_leaf(TensorImpl* leaf, Tensor grad) {
    auto [it, inserted] = leaf_index_.try_emplace(leaf, leaves_.size());
    if (inserted) leaves_.push_back(LeafGrad{leaf, Tensor(), false});
    accumulate(leaves_[it->second].grad, std::move(grad));
  }

  // Adds the gradients of leaves not finished yet (a root that is itself a leaf) to their
  // grad(), in first-reached order.
  void flush_leaves() {
    for (std::size_t i = 0; i < leaves_.size(); ++i) flush(leaves_[i]);
  }

 private:
  struct LeafGrad {
    TensorImpl* leaf;
    Tensor grad;   // the sum of this backward's gradients reaching it
    bool flushed;  // added to the leaf's grad() and its hooks run
  };

  // A leaf's gradient of this backward is complete: adds it to grad() and runs its hooks, so
  // what they trace follows the leaf's last gradient op. A leaf no gradient reached is left
  // alone, as torch's AccumulateGrad is never run for it.
  void finish_leaf(TensorImpl* leaf) {
    const auto it = leaf_index_.find(leaf);
    if (it != leaf_index_.end()) flush(leaves_[it->second]);
  }

  void flush(LeafGrad& entry) {
    if (entry.flushed) return;
    entry.flushed = true;
    AutogradMeta* meta = entry.leaf->autograd();
    if (!meta || !meta->requires_grad) return;  // turned off after the graph was recorded
    Tensor grad = std::move(entry.grad);
    meta->grad = meta->grad.defined() ? add(meta->grad, grad) : own_handle(grad);
    if (meta->post_accumulate_grad_hooks.empty()) return;
    // A copy: a hook may remove itself or register others.
    const auto hooks = meta->post_accumulate_grad_hooks;
    const Tensor leaf{IntrusivePtr<TensorImpl>(entry.leaf)};
    for (const auto& [handle, hook] : hooks) hook(leaf);
  }

  // Counts, for every GradFn reachable from the root, the edges that lead to it.
  void count_dependencies(GradFn* root) {
    pending_.try_emplace(root);
    std::vector<GradFn*> stack{root};
    while (!stack.empty()) {
      GradFn* fn = stack.back();
      stack.pop_back();
      for (const GradEdge& edge : fn->edges()) {
        GradFn* next = edge.fn.get();
        if (!next && edge.leaf && !capturing_) ++leaf_dependencies_[edge.leaf.get()];
        if (!next || target_index_.contains(next)) continue;
        auto [it, inserted] = pending_.try_emplace(next);
        ++it->second.dependencies;
        if (inserted) stack.push_back(next);
      }
    }
  }

  autograd::GradList apply(const GradFn& fn, const Tensor& grad) {
    if (fn.released()) {
      ops::fail("backward",
                fmt::format("cannot go through {} a second time: the first backward freed the "
                            "tensors it saved; pass retain_graph=true to that backward() to keep "
                            "them",
                            fn.name()),
                where_);
    }
    autograd::GradList grads;
    for (std::size_t i = 0; i < fn.num_inputs(); ++i) grads.push_back(Tensor());
    fn.derivative().apply(fn, grad, grads);
    for (std::size_t i = 0; i < fn.num_inputs(); ++i) {
      if (!fn.needs_grad(i)) {
        grads[i] = Tensor();
      } else if (grads[i].defined()) {
        grads[i] = fit_to_input(grads[i], fn.input(i));
      }
    }
    return grads;
  }

  bool retain_graph_;
  Loc where_;
  std::unordered_map<GradFn*, PendingFn> pending_;
  std::unordered_map<TensorImpl*, std::size_t> leaf_index_;
  std::vector<LeafGrad> leaves_;
  std::unordered_map<TensorImpl*, int64_t> leaf_dependencies_;  // leaf edges not walked yet
  bool capturing_ = false;
  std::unordered_map<const void*, std::size_t> target_index_;
  autograd::GradList captured_;
};

}  // namespace

namespace autograd {

GradList gradients_at(const Tensor& output, const Tensor& grad_output,
                      std::span<const GradEdge> targets, const std::source_location& where) {
  NoGradGuard no_grad;
  Backward pass(/*retain_graph=*/false, where);
  pass.capture(targets);
  const AutogradMeta* meta = output.impl()->autograd();
  GradFn* root = meta ? meta->grad_fn.get() : nullptr;
  if (root) {
    pass.run(root, grad_output);
    return pass.take_captured();
  }
  // A leaf: its gradient is grad_output, if it is a target.
  GradList grads;
  for (const GradEdge& target : targets) {
    grads.push_back(target.leaf.get() == output.impl() ? grad_output : Tensor());
  }
  return grads;
}

void queue_callback(std::function<void()> callback, std::source_location where) {
  BackwardCallbacks* callbacks = ThisThread<BackwardCallbacks>::get();
  if (callbacks == nullptr) {
    throw std::logic_error(fmt::format(
        "queue_callback at {}:{}: no backward() is running on this thread; queue callbacks from "
        "a hook that backward() runs",
        where.file_name(), where.line()));
  }
  callbacks->queued.push_back(std::move(callback));
}

}  // namespace autograd

void Tensor::backward(const Tensor& gradient, bool retain_graph, std::source_location where) const {
  ops::require_defined("backward", *this, "the tensor", where);
  if (!requires_grad()) {
    ops::fail("backward",
              fmt::format("{} does not require grad and has no grad_fn: no op that made it had an "
                          "operand requiring grad (see requires_grad_()), or grad mode was off",
                          ops::describe(*this)),
              where);
  }
  NoGradGuard no_grad;
  // Gradients run in the dtypes the forward pass used, even when backward() is called inside an
  // autocast region (as torch's backward ops do).
  const ops::AutocastSuspended no_autocast;
  Tensor grad = gradient;
  if (!grad.defined()) {
    if (numel() != 1) {
      ops::fail("backward",
                fmt::format("a gradient can be implied only for a tensor of one element; {} needs "
                            "an explicit gradient, as in t.backward(ones_like(t))",
                            ops::describe(*this)),
                where);
    }
    grad = ones_like(*this, where);
  } else {
    if (!(grad.shape() == shape()) || !(grad.device() == device())) {
      ops::fail("backward",
                fmt::format("the gradient {} on {} does not match the tensor {} on {}",
                            ops::describe(grad), grad.device().to_string(), ops::describe(*this),
                            device().to_string()),
                where);
    }
    if (grad.dtype() != dtype()) grad = cast(grad, dtype(), where);
  }
  BackwardCallbacks callbacks;
  const CallbackQueueScope queue(callbacks);
  Backward pass(retain_graph, where);
  GradFn* root = impl()->autograd()->grad_fn.get();
  if (root) {
    pass.run(root, std::move(grad));
  } else {
    pass.add_to_leaf(impl(), std::move(grad));
    pass.flush_leaves();
  }
  // By index: a callback may queue another.
  for (std::size_t i = 0; i < callbacks.queued.size(); ++i) {
    const std::function<void()> callback = std::move(callbacks.queued[i]);
    callback();
  }
}

}  // namespace axle
