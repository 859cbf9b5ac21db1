// graph/autograd: recording backward functions, their lifetime, and Tensor's autograd members
// (backward() itself is in engine.cpp).
#include "graph/autograd/function.h"

#include <fmt/format.h>

#include <vector>

#include "graph/ops/op_util.h"

namespace axle {
namespace {

// What ~GradFn hands on instead of releasing it in place: the GradFns and tensors it held. The
// outermost ~GradFn on the thread releases them one at a time, so freeing a chain of a million
// recorded ops takes a loop, not a million nested destructors.
struct Graveyard {
  bool draining = false;
  std::vector<IntrusivePtr<GradFn>> fns;
  std::vector<Tensor> tensors;
  Graveyard();
  ~Graveyard();
};

// Tensors in static storage may die after this thread's thread_locals; a trivially destructible
// flag stays readable then, and ~GradFn falls back to plain (recursive) release.
enum class GraveyardState : uint8_t { kUnborn, kAlive, kDead };
thread_local GraveyardState tls_graveyard_state = GraveyardState::kUnborn;
thread_local Graveyard tls_graveyard;

Graveyard::Graveyard() { tls_graveyard_state = GraveyardState::kAlive; }
Graveyard::~Graveyard() { tls_graveyard_state = GraveyardState::kDead; }

bool tensor_requires_grad(const Tensor& t) noexcept {
  const AutogradMeta* meta = t.impl()->autograd();
  return meta && meta->requires_grad;
}

GradEdge edge_to(const Tensor& t) {
  const AutogradMeta* meta = t.impl()->autograd();
  if (!meta || !meta->requires_grad) return {};
  if (meta->grad_fn) return {meta->grad_fn, {}};
  return {{}, t.impl_ptr()};
}

// Releases what the graveyard holds, unless an enclosing call on this thread already does.
void drain(Graveyard& graveyard) {
  if (graveyard.draining) return;
  graveyard.draining = true;
  // Each release may run another ~GradFn, which queues its own members here and returns.
  while (!graveyard.fns.empty() || !graveyard.tensors.empty()) {
    if (!graveyard.tensors.empty()) {
      Tensor last = std::move(graveyard.tensors.back());
      graveyard.tensors.pop_back();
    } else {
      IntrusivePtr<GradFn> last = std::move(graveyard.fns.back());
      graveyard.fns.pop_back();
    }
  }
  graveyard.draining = false;
}

}  // namespace

void AutogradMetaDeleter::operator()(AutogradMeta* meta) const noexcept { delete meta; }

AutogradMeta& TensorImpl::autograd_or_create() {
  if (!autograd_) autograd_.reset(new AutogradMeta());
  return *autograd_;
}

GradFn::~GradFn() {
  if (tls_graveyard_state == GraveyardState::kDead) return;  // members release recursively
  Graveyard& graveyard = tls_graveyard;
  for (GradEdge& edge : edges_) {
    if (edge.fn) graveyard.fns.push_back(std::move(edge.fn));
  }
  for (Tensor& input : inputs_) {
    if (input.defined()) graveyard.tensors.push_back(std::move(input));
  }
  drain(graveyard);
}

void GradFn::release_saved() {
  released_ = true;
  if (tls_graveyard_state == GraveyardState::kDead) {
    for (Tensor& input : inputs_) input = Tensor();
    return;
  }
  // Through the graveyard as well: a saved input may be the last holder of a long chain.
  Graveyard& graveyard = tls_graveyard;
  for (Tensor& input : inputs_) {
    if (input.defined()) graveyard.tensors.push_back(std::move(input));
  }
  drain(graveyard);
}

namespace autograd {

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
  for (const Tensor& t : inputs) fn->add_input(t, edge_to(t));
  fn->set_attributes(std::move(ints), std::move(reals));
  AutogradMeta& meta = result.impl()->autograd_or_create();
  meta.requires_grad = true;
  meta.grad_fn = std::move(fn);
}

std::string_view grad_fn_name(const Tensor& t) {
  const AutogradMeta* meta = t.defined() ? t.impl()->autograd() : nullptr;
  return meta && meta->grad_fn ? meta->grad_fn->name() : std::string_view();
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
