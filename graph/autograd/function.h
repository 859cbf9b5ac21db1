// graph/autograd: the recorded backward graph. An op whose operand requires grad (while grad mode
// is on) hangs a GradFn off its result's TensorImpl: which derivative to apply, the operands it
// saved, the op's attributes, and an edge per operand to where that operand's gradient goes.
// IR nodes carry none of this, so a graph traced without autograd costs nothing extra.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/small_vector.h"
#include "axle/graph/autograd.h"
#include "axle/graph/ir.h"
#include "axle/graph/tensor.h"

namespace axle {

class GradFn;

/// A tensor's autograd state. Leaves that require grad have one (with their grad); so does the
/// result of every recorded op (with its grad_fn); other tensors have none.
struct AutogradMeta {
  bool requires_grad = false;    ///< for leaves; always true with a grad_fn
  IntrusivePtr<GradFn> grad_fn;  ///< null for leaves
  Tensor grad;                   ///< leaves only: the gradient backward() accumulated
  /// Leaves only: run once a backward() has added its gradient to `grad`, by handle.
  std::vector<std::pair<std::size_t, autograd::PostAccumulateGradHook>> post_accumulate_grad_hooks;
};

namespace autograd {

/// The gradients of a GradFn's inputs, in input order (undefined: none for that input).
using GradList = SmallVector<Tensor, 3>;

/// An op's derivative: given the GradFn (saved inputs, attributes) and the gradient of the op's
/// result, fills `grads` for the inputs that need one (fn.needs_grad(i)). Gradients may come in
/// the result's shape and dtype: backward() sums them to each input's shape (undoing
/// broadcasting) and casts them to its dtype.
using Formula = void (*)(const GradFn& fn, const Tensor& grad, GradList& grads);

struct Derivative {
  std::string_view name;  ///< "MulBackward", as torch names its grad_fns
  Formula apply;
};

}  // namespace autograd

/// Where an input's gradient goes: the GradFn that produced the input, or the leaf itself.
struct GradEdge {
  IntrusivePtr<GradFn> fn;
  IntrusivePtr<TensorImpl> leaf;
  [[nodiscard]] bool defined() const noexcept { return fn || leaf; }
};

/// One recorded op of the backward graph.
class GradFn final : public RefCounted {
 public:
  explicit GradFn(const autograd::Derivative& derivative) noexcept;
  /// Frees the graph behind it iteratively: a chain of a million ops must not recurse.
  ~GradFn() override;

  [[nodiscard]] std::string_view name() const noexcept { return derivative_->name; }
  [[nodiscard]] const autograd::Derivative& derivative() const noexcept { return *derivative_; }

  /// The op's operands as it saw them (released by backward unless it retains the graph).
  [[nodiscard]] const Tensor& input(std::size_t i) const noexcept { return inputs_[i]; }
  [[nodiscard]] std::size_t num_inputs() const noexcept { return edges_.size(); }
  [[nodiscard]] bool needs_grad(std::size_t i) const noexcept { return edges_[i].defined(); }
  [[nodiscard]] std::span<const GradEdge> edges() const noexcept { return edges_.span(); }
  [[nodiscard]] const IntAttrs& ints() const noexcept { return ints_; }
  [[nodiscard]] const RealAttrs& reals() const noexcept { return reals_; }

  /// Building (autograd::record): an operand and where its gradient goes, then the attributes.
  void add_input(Tensor input, GradEdge edge) {
    inputs_.push_back(std::move(input));
    edges_.push_back(std::move(edge));
  }
  void set_attributes(IntAttrs ints, RealAttrs reals) {
    ints_ = std::move(ints);
    reals_ = std::move(reals);
  }

  /// The order of recording on this thread (torch's sequence_nr): a GradFn recorded later has a
  /// larger number.
  [[nodiscard]] uint64_t sequence_nr() const noexcept { return sequence_nr_; }
  /// The number the next GradFn recorded on this thread gets.
  [[nodiscard]] static uint64_t peek_sequence_nr() noexcept;

  /// What a derivative keeps beyond saved tensors and attributes (checkpoint's function and
  /// inputs); freed with the saved inputs.
  [[nodiscard]] const std::shared_ptr<void>& context() const noexcept { return context_; }
  void set_context(std::shared_ptr<void> context) noexcept { context_ = std::move(context); }

  /// Whether backward already freed the saved inputs.
  [[nodiscard]] bool released() const noexcept { return released_; }
  /// Frees the saved inputs (the edges stay: later graphs may still hang off this one).
  void release_saved();

 private:
  const autograd::Derivative* derivative_;
  SmallVector<Tensor, 3> inputs_;
  SmallVector<GradEdge, 3> edges_;
  IntAttrs ints_;
  RealAttrs reals_;
  std::shared_ptr<void> context_;
  uint64_t sequence_nr_;
  bool released_ = false;
};

namespace autograd {

/// Whether an op on these operands may need recording: one of them has autograd state and grad
/// mode is on. The common case (no state) costs a load and a branch per operand.
template <class... T>
[[nodiscard]] inline bool should_record(const T&... inputs) noexcept {
  return ((inputs.impl()->autograd() != nullptr) || ...) && GradMode::is_enabled();
}
[[nodiscard]] bool should_record_list(std::span<const Tensor> inputs) noexcept;

/// Where `t`'s gradient goes: its grad_fn, or itself when it is a leaf that requires grad, or
/// nowhere (torch's gradient_edge).
[[nodiscard]] GradEdge gradient_edge(const Tensor& t);

/// For a GradFn standing for a whole function (checkpoint, an FSDP unit): adds to `grad_fn` an
/// input for every edge leaving the GradFns the function recorded (those numbered from
/// `first_recorded` on, reached from `output`) towards anything other than `own_leaves` (the
/// function's own handles of its inputs): the parameters it read, tensors computed before it. An
/// `output` that is a leaf requiring grad and none of `own_leaves` is such an input itself.
void add_edges_leaving(GradFn& grad_fn, const Tensor& output,
                       const std::unordered_set<const TensorImpl*>& own_leaves,
                       uint64_t first_recorded);

/// The gradients reaching `targets` when backpropagating `grad_output` from `output`, as
/// torch.autograd.grad(output, targets, grad_output): nothing is added to any leaf's grad(), and
/// the walk stops at the targets (a GradFn target is not run). Each target is a leaf or a GradFn;
/// a gradient that reaches none is undefined. The graph behind `output` is freed as it goes.
[[nodiscard]] GradList gradients_at(const Tensor& output, const Tensor& grad_output,
                                    std::span<const GradEdge> targets,
                                    const std::source_location& where);

/// Records `result` as computed from `inputs` by an op with `derivative` and attributes, if an
/// input requires grad and the result is floating-point (integer and bool results never carry
/// gradients).
void record(const Derivative& derivative, const Tensor& result, std::span<const Tensor> inputs,
            IntAttrs ints = {}, RealAttrs reals = {});
inline void record(const Derivative& derivative, const Tensor& result,
                   std::initializer_list<Tensor> inputs, IntAttrs ints = {}, RealAttrs reals = {}) {
  record(derivative, result, std::span<const Tensor>(inputs.begin(), inputs.size()),
         std::move(ints), std::move(reals));
}

}  // namespace autograd
}  // namespace axle
