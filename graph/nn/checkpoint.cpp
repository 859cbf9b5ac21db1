// graph/nn: checkpoint() — the forward pass runs fn once and keeps only its inputs; one
// GradFn (CheckpointBackward) stands for all of fn, with an edge to each input that requires
// grad and to everything else fn reads that does (found by walking the GradFns fn recorded).
// Its derivative runs fn again on the inputs, passed with the incoming gradient through one
// optimization barrier, and backpropagates through that run to those edges.
// checkpoint_module runs a module's forward through checkpoint().
#include "axle/graph/nn/checkpoint.h"

#include <fmt/format.h>

#include <unordered_set>
#include <utility>

#include "axle/graph/autocast.h"
#include "axle/graph/autograd.h"
#include "axle/graph/autograd/function.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"
#include "axle/graph/trace_context.h"

namespace axle::utils {
namespace {

constexpr std::string_view kOp = "checkpoint";

// What CheckpointBackward needs beyond its edges.
struct CheckpointContext {
  CheckpointFunction fn;
  std::vector<Tensor> inputs;       // every input, as given
  std::vector<uint8_t> needs_grad;  // per input: it has an edge (they come first, in order)
  std::size_t num_input_edges = 0;
  bool preserve_rng_state = true;
  std::unordered_map<int, RngState> rng;  // the random state fn first ran with
  bool autocast = false;                  // the autocast state fn first ran in (backward
  DType autocast_dtype = DType::kBFloat16;  // traces outside any region)
  DType dtype;
  Shape shape;
  std::source_location where;
};

void checkpoint_backward(const GradFn& fn, const Tensor& grad, autograd::GradList& grads) {
  const auto& ctx = *static_cast<const CheckpointContext*>(fn.context().get());
  // The inputs and the incoming gradient through one barrier: the recomputation waits for the
  // gradient (it runs when the backward pass gets here, not with the forward pass) and reads
  // values no pass identifies with the forward pass's, so CSE cannot merge the two runs.
  std::vector<Tensor> barrier;
  barrier.reserve(ctx.inputs.size() + 1);
  // (Handles of their own, outside autograd: the barrier and requires_grad_ below change nothing
  // the caller holds.)
  for (const Tensor& input : ctx.inputs) barrier.push_back(input.detach());
  barrier.push_back(grad.detach());
  optimization_barrier_(barrier, ctx.where);
  const Tensor barriered_grad = barrier.back();
  barrier.pop_back();
  std::vector<GradEdge> targets;
  for (std::size_t i = 0; i < barrier.size(); ++i) {
    if (!ctx.needs_grad[i]) continue;
    barrier[i].requires_grad_();
    targets.push_back(autograd::gradient_edge(barrier[i]));
  }
  const std::span<const GradEdge> edges = fn.edges();
  targets.insert(targets.end(), edges.begin() + static_cast<std::ptrdiff_t>(ctx.num_input_edges),
                 edges.end());

  Tensor output;
  {
    TraceContext& trace = TraceContext::current();
    std::unordered_map<int, RngState> now;
    if (ctx.preserve_rng_state) {
      now = trace.rng_states();
      trace.set_rng_states(ctx.rng);
    }
    struct RestoreRng {
      TraceContext& trace;
      std::unordered_map<int, RngState>& now;
      bool active;
      ~RestoreRng() {
        if (active) trace.set_rng_states(std::move(now));
      }
    } restore{trace, now, ctx.preserve_rng_state};
    // The recomputation runs in the autocast state of the first run, as torch's checkpoint
    // does: the same ops in the same dtypes.
    const autocast region(Device{}, ctx.autocast_dtype, ctx.autocast, ctx.where);
    AutoGradMode grad_mode(true);
    output = ctx.fn(barrier);
  }
  if (!output.defined() || output.dtype() != ctx.dtype || !(output.shape() == ctx.shape)) {
    ops::fail(kOp,
              fmt::format("the function's recomputation in the backward pass gave {} where its "
                          "first run gave {}: a checkpointed function must compute the same thing "
                          "both times",
                          output.defined() ? ops::describe(output) : "an undefined tensor",
                          ops::describe(ctx.dtype, ctx.shape)),
              ctx.where);
  }
  if (!output.requires_grad()) {
    ops::fail(kOp,
              "the function's recomputation in the backward pass does not require grad, though "
              "its first run did: a checkpointed function must compute the same thing both times",
              ctx.where);
  }
  autograd::GradList got = autograd::gradients_at(output, barriered_grad, targets, ctx.where);
  for (std::size_t i = 0; i < got.size() && i < grads.size(); ++i) grads[i] = std::move(got[i]);
}

const autograd::Derivative kCheckpointBackward{"CheckpointBackward", checkpoint_backward};

}  // namespace

Tensor checkpoint(CheckpointFunction fn, const std::vector<Tensor>& inputs, bool preserve_rng_state,
                  std::source_location where) {
  if (!fn) ops::fail(kOp, "the function is empty", where);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ops::fail(kOp, fmt::format("input {} of {} is undefined", i, inputs.size()), where);
    }
  }
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing would be saved for a backward

  auto ctx = std::make_shared<CheckpointContext>();
  ctx->preserve_rng_state = preserve_rng_state;
  if (preserve_rng_state) ctx->rng = TraceContext::current().rng_states();
  ctx->autocast = is_autocast_enabled();
  ctx->autocast_dtype = get_autocast_dtype();
  ctx->where = where;
  // fn runs on handles of the inputs' values of its own, so that the GradFns it records end at
  // them; the walk below tells those apart from what else fn reads.
  std::vector<Tensor> own;
  own.reserve(inputs.size());
  std::unordered_set<const TensorImpl*> own_impls;
  for (const Tensor& input : inputs) {
    Tensor d = input.detach();
    const bool needs = input.requires_grad();
    if (needs) d.requires_grad_();
    ctx->needs_grad.push_back(needs ? 1 : 0);
    own_impls.insert(d.impl());
    own.push_back(std::move(d));
  }
  const uint64_t first_recorded = GradFn::peek_sequence_nr();
  Tensor output = fn(own);
  if (!output.defined()) ops::fail(kOp, "the function returned an undefined tensor", where);
  if (!output.requires_grad()) return output;  // nothing to differentiate

  auto grad_fn = make_intrusive<GradFn>(kCheckpointBackward);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (ctx->needs_grad[i]) grad_fn->add_input(inputs[i], autograd::gradient_edge(inputs[i]));
  }
  ctx->num_input_edges = grad_fn->num_inputs();
  // The GradFns fn recorded have sequence numbers from first_recorded on; an edge out of them to
  // anything else (a parameter, a tensor computed before) is an edge of the checkpoint.
  autograd::add_edges_leaving(*grad_fn, output, own_impls, first_recorded);
  ctx->fn = std::move(fn);
  ctx->inputs = inputs;
  ctx->dtype = output.dtype();
  ctx->shape = output.shape();
  grad_fn->set_context(std::move(ctx));

  // The result: fn's value, with CheckpointBackward instead of the GradFns fn recorded (which go
  // now, and with them everything they saved).
  Tensor result = output.detach();
  AutogradMeta& meta = result.impl()->autograd_or_create();
  meta.requires_grad = true;
  meta.grad_fn = std::move(grad_fn);
  return result;
}

Tensor checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input,
                  bool preserve_rng_state, std::source_location where) {
  if (!fn) ops::fail(kOp, "the function is empty", where);
  return checkpoint([fn = std::move(fn)](const std::vector<Tensor>& in) { return fn(in[0]); },
                    std::vector<Tensor>{input}, preserve_rng_state, where);
}

CheckpointModule::CheckpointModule(std::shared_ptr<nn::Module> module) {
  register_module("", std::move(module));  // "": the names stay the module's
}

Tensor CheckpointModule::forward(const Tensor& input) {
  // Through the child list, so a wrapper put in the module's place (an FSDP auto-wrap policy,
  // Module::replace_module) is what runs.
  nn::Module* module = named_children().front().second.get();
  return checkpoint([module](const Tensor& x) { return module->forward(x); }, input);
}

Tensor CheckpointModule::forward(const Tensor& input, const Tensor& other) {
  nn::Module* module = named_children().front().second.get();
  return checkpoint(
      [module](const std::vector<Tensor>& in) { return module->forward(in[0], in[1]); },
      std::vector<Tensor>{input, other});
}

std::shared_ptr<CheckpointModule> checkpoint_module(std::shared_ptr<nn::Module> module,
                                                    std::source_location where) {
  if (!module) ops::fail("checkpoint_module", "the module is null", where);
  return std::make_shared<CheckpointModule>(std::move(module));
}

}  // namespace axle::utils
