// graph/autograd: recording backward functions, their lifetime, and Tensor's autograd members
// (backward() itself is in engine.cpp).
#include "axle/graph/autograd/function.h"

#include <fmt/format.h>

#include <atomic>
#include <string>
#include <unordered_set>
#include <vector>

#include "axle/engine/release_queue.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

bool tensor_requires_grad(const Tensor& t) noexcept {
  const AutogradMeta* meta = t.impl()->autograd();
  return meta && meta->requires_grad;
}

// The sequence number of the next GradFn this thread records.
struct GradFnSequence {
  uint64_t next = 0;
};

}  // namespace

GradFn::GradFn(const autograd::Derivative& derivative) noexcept
    : derivative_(&derivative), sequence_nr_(this_thread_object<GradFnSequence>().next++) {}

uint64_t GradFn::peek_sequence_nr() noexcept { return this_thread_object<GradFnSequence>().next; }

void AutogradMetaDeleter::operator()(AutogradMeta* meta) const noexcept { delete meta; }

AutogradMeta& TensorImpl::autograd_or_create() {
  if (!autograd_) autograd_.reset(new AutogradMeta());
  return *autograd_;
}

// A GradFn hands what it holds (the GradFns before it, its saved tensors) to the thread's
// ReleaseScope instead of releasing it in place, so freeing a chain of a million recorded ops
// takes a loop, not a million nested destructors.
GradFn::~GradFn() {
  ReleaseScope scope;
  for (GradEdge& edge : edges_) scope.defer(std::move(edge.fn));
  for (Tensor& input : inputs_) scope.defer(input.take_impl());
}

void GradFn::release_saved() {
  released_ = true;
  // Deferred as well: a saved input may be the last holder of a long chain.
  ReleaseScope scope;
  for (Tensor& input : inputs_) scope.defer(input.take_impl());
  context_.reset();
}

namespace autograd {

void add_edges_leaving(GradFn& grad_fn, const Tensor& output,
                       const std::unordered_set<const TensorImpl*>& own_leaves,
                       uint64_t first_recorded) {
  std::unordered_set<const void*> seen;
  std::vector<GradFn*> stack;
  if (output.impl()->autograd()->grad_fn) {
    stack.push_back(output.impl()->autograd()->grad_fn.get());
    seen.insert(stack.back());
  } else if (!own_leaves.contains(output.impl())) {
    grad_fn.add_input(output, gradient_edge(output));
  }
  while (!stack.empty()) {
    GradFn* recorded = stack.back();
    stack.pop_back();
    const std::span<const GradEdge> edges = recorded->edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const GradEdge& edge = edges[i];
      if (!edge.defined()) continue;
      if (edge.leaf && own_leaves.contains(edge.leaf.get())) continue;
      const void* key = edge.fn ? static_cast<const void*>(edge.fn.get())
                                : static_cast<const void*>(edge.leaf.get());
      if (!seen.insert(key).second) continue;
      if (edge.fn && edge.fn->sequence_nr() >= first_recorded) {
        stack.push_back(edge.fn.get());
      } else {
        grad_fn.add_input(recorded->input(i), edge);
      }
    }
  }
}

GradEdge gradient_edge(const Tensor& t) {
  const AutogradMeta* meta = t.impl()->autograd();
  if (!meta || !meta->requires_grad) return {};
  if (meta->grad_fn) return {meta->grad_fn, {}};
  return {{}, t.impl_ptr()};
}

bool should_record_list(std::span<const Tensor> inputs) noexcept {
  for (const Tensor& t : inputs) {
    if (t.impl()->autograd()) return GradMode::is_enabled();
  }
  return false;
}

void record(const Derivative& derivative, const Tensor& result, std::span<const Tensor> inputs,
            IntAttrs ints, RealAttrs reals) {
  if (!GradMode::is_enabled() || !is_floating(result.dtype())) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || tensor_requires_grad(t);
  if (!any) return;
  auto fn = make_intrusive<GradFn>(derivative);
  for (const Tensor& t : inputs) fn->add_input(t, gradient_edge(t));
  fn->set_attributes(std::move(ints), std::move(reals));
  AutogradMeta& meta = result.impl()->autograd_or_create();
  meta.requires_grad = true;
  meta.grad_fn = std::move(fn);
}

std::string_view grad_fn_name(const Tensor& t) {
  const AutogradMeta* meta = t.defined() ? t.impl()->autograd() : nullptr;
  return meta && meta->grad_fn ? meta->grad_fn->name() : std::string_view();
}

std::size_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook,
                                               std::source_location where) {
  ops::require_defined("register_post_accumulate_grad_hook", leaf, "the tensor", where);
  AutogradMeta* meta = leaf.impl()->autograd();
  if (!meta || !meta->requires_grad || meta->grad_fn) {
    ops::fail(
        "register_post_accumulate_grad_hook",
        fmt::format("{} is not a leaf that requires grad: {}", ops::describe(leaf),
                    meta && meta->grad_fn ? fmt::format("it was made by {}", meta->grad_fn->name())
                                          : std::string("call requires_grad_() on it first")),
        where);
  }
  // Handles are unique in the process, so one taken from another leaf never removes this one's.
  static std::atomic<std::size_t> next_handle{1};
  const std::size_t handle = next_handle.fetch_add(1, std::memory_order_relaxed);
  meta->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, std::size_t handle) noexcept {
  AutogradMeta* meta = leaf.defined() ? leaf.impl()->autograd() : nullptr;
  if (!meta) return;
  std::erase_if(meta->post_accumulate_grad_hooks,
                [handle](const auto& entry) { return entry.first == handle; });
}

}  // namespace autograd

// ---- Tensor's autograd members ----------------------------------------------------------------

bool Tensor::requires_grad() const { return defined() && tensor_requires_grad(*this); }

const Tensor& Tensor::requires_grad_(bool requires_grad, std::source_location where) const {
  ops::require_defined("requires_grad_", *this, "the tensor", where);
  AutogradMeta* meta = impl()->autograd();
  if (meta && meta->grad_fn) {
    if (!requires_grad) {
      ops::fail("requires_grad_",
                fmt::format("cannot turn off requires_grad of the non-leaf {} (made by {}); use "
                            "detach() for a value outside the autograd graph",
                            ops::describe(*this), meta->grad_fn->name()),
                where);
    }
    return *this;
  }
  if (requires_grad && !is_floating(dtype())) {
    ops::fail("requires_grad_",
              fmt::format("only floating-point tensors can require gradients, not {}",
                          ops::describe(*this)),
              where);
  }
  if (requires_grad || meta) impl()->autograd_or_create().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* meta = defined() ? impl()->autograd() : nullptr;
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad, std::source_location where) const {
  ops::require_defined("set_grad", *this, "the tensor", where);
  if (grad.defined() &&
      (!(grad.shape() == shape()) || grad.dtype() != dtype() || !(grad.device() == device()))) {
    ops::fail(
        "set_grad",
        fmt::format("the gradient {} on {} does not match the tensor {} on {}", ops::describe(grad),
                    grad.device().to_string(), ops::describe(*this), device().to_string()),
        where);
  }
  AutogradMeta* meta = impl()->autograd();
  if (!meta && !grad.defined()) return;  // nothing to reset
  impl()->autograd_or_create().grad = grad;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* meta = defined() ? impl()->autograd() : nullptr;
  return !meta || !meta->grad_fn;
}

Tensor Tensor::detach() const {
  if (!defined()) return {};
  TensorImpl& self = *impl();
  if (self.pending_ir()) {
    return Tensor(make_intrusive<TensorImpl>(self.dtype(), self.ir(), self.device()));
  }
  return Tensor(make_intrusive<TensorImpl>(self.dtype(), self.data()));
}

}  // namespace axle
