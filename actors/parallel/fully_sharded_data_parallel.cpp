// actors/parallel: FullyShardedDataParallel — sharding a module's parameters at wrapping, gathering
// them around its forward, its backward (run again on a new gather when resharded)
// reduce-scattering the averaged gradients, and nested units by auto-wrap policy. What a
// checkpoint and clipping see of the shards is in fsdp_checkpoint.cpp.
#include "axle/actors/parallel/fully_sharded_data_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "axle/actors/host/replicas.h"
#include "axle/actors/parallel/fsdp_internal.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/autocast.h"
#include "axle/graph/autograd.h"
#include "axle/graph/autograd/function.h"
#include "axle/graph/collectives.h"
#include "axle/graph/device.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"
#include "axle/graph/trace_context.h"

namespace axle {

using fsdp::child_prefix;
using fsdp::dims_of;
using fsdp::Flat;
using fsdp::kWrapped;
using fsdp::Slot;

namespace {

constexpr std::string_view kOp = "FullyShardedDataParallel";

// Nesting depth of FSDP units running on this thread: a unit that starts at depth 0 is the
// root, whose parameters the backward pass needs first, so it never reshards after forward.
struct FsdpNesting {
  int depth = 0;
};

Tensor gather_shard(const Tensor& shard, int world, std::source_location where) {
  return world == 1 ? shard : all_gather(shard, 0, {}, where);
}

// Parameters of `m`'s tree not inside an FSDP unit, each tensor once.
int64_t unwrapped_numel(const nn::Module& m) {
  std::unordered_map<const TensorImpl*, int64_t> seen;
  auto walk = [&](auto& self, const nn::Module& at) -> void {
    if (dynamic_cast<const FullyShardedDataParallel*>(&at) != nullptr) return;
    for (const auto& [name, t] : at.own_parameters()) {
      if (t.defined()) seen.emplace(t.impl(), t.numel());
    }
    for (const auto& [name, child] : at.named_children()) self(self, *child);
  };
  walk(walk, m);
  int64_t total = 0;
  for (const auto& [impl, n] : seen) total += n;
  return total;
}

// Every name each parameter tensor has in `m`'s tree outside FSDP units (tied ones: several).
using ParameterNames = std::unordered_map<const TensorImpl*, std::vector<std::string>>;
void collect_parameter_names(const nn::Module& m, const std::string& prefix,
                             ParameterNames& names) {
  if (dynamic_cast<const FullyShardedDataParallel*>(&m) != nullptr) return;
  for (const auto& [name, t] : m.own_parameters()) {
    if (t.defined()) names[t.impl()].push_back(prefix + name);
  }
  for (const auto& [name, child] : m.named_children()) {
    collect_parameter_names(*child, child_prefix(prefix, name), names);
  }
}

// A unit about to be made at `path` must hold every name of each parameter it shards: a
// parameter shared with a module outside the unit (tied weights across units) is not supported.
void check_unit_holds_its_tied_parameters(const nn::Module& unit, const std::string& inside_prefix,
                                          const ParameterNames& all, std::source_location where) {
  ParameterNames inside;
  collect_parameter_names(unit, inside_prefix, inside);
  std::vector<std::string> shared;
  for (const auto& [impl, names] : inside) {
    const auto it = all.find(impl);
    if (it == all.end()) continue;
    for (const std::string& name : it->second) {
      if (!name.starts_with(inside_prefix)) {
        shared.push_back(fmt::format("{} (also {})", names.front(), name));
      }
    }
  }
  if (shared.empty()) return;
  std::ranges::sort(shared);
  const std::string path =
      inside_prefix.empty() ? "" : inside_prefix.substr(0, inside_prefix.size() - 1);
  ops::fail(kOp,
            fmt::format("auto_wrap_policy makes `{}` a unit, but {} {} shared with a module "
                        "outside it: {}. Parameters tied across FSDP units are not supported; "
                        "let the policy put the modules sharing them in one unit (e.g. leave them "
                        "in the root unit), or untie them",
                        path, shared.size() == 1 ? "a parameter" : "parameters",
                        shared.size() == 1 ? "is" : "are", fmt::join(shared, ", ")),
            where);
}

// torch's _recursive_wrap: units are made bottom-up, each child wrapped after its own children.
// `all` holds every parameter's names in the root's tree before any wrapping.
void recursive_wrap(nn::Module& m, const std::string& prefix, const ParameterNames& all,
                    const FsdpOptions& inner, std::source_location where) {
  const auto children = m.named_children();  // a copy: wrapping replaces entries
  for (const auto& [name, child] : children) {
    if (dynamic_cast<const FullyShardedDataParallel*>(child.get()) != nullptr) continue;
    const std::string inside_prefix = child_prefix(prefix, name);
    if (inner.auto_wrap_policy(*child, true, unwrapped_numel(*child))) {
      recursive_wrap(*child, inside_prefix, all, inner, where);
    }
    if (inner.auto_wrap_policy(*child, false, unwrapped_numel(*child))) {
      check_unit_holds_its_tied_parameters(*child, inside_prefix, all, where);
      FsdpOptions unit = inner;
      unit.auto_wrap_policy = nullptr;  // its children are wrapped already
      m.replace_module(name, std::make_shared<FullyShardedDataParallel>(child, unit, where), where);
    }
  }
}

}  // namespace

AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params) {
  return [min_num_params](const nn::Module&, bool recurse, int64_t unwrapped_params) {
    return recurse || unwrapped_params >= min_num_params;
  };
}

AutoWrapPolicy module_type_auto_wrap_policy(std::function<bool(const nn::Module&)> is_layer) {
  return [is_layer = std::move(is_layer)](const nn::Module& m, bool recurse, int64_t) {
    return recurse || is_layer(m);
  };
}

namespace {

// Fails, naming what is wrong, on a module or options FullyShardedDataParallel cannot wrap.
void check_wrapping(const nn::Module* module, const FsdpOptions& options,
                    std::source_location where) {
  if (!module) ops::fail(kOp, "the module is null", where);
  if (dynamic_cast<const FullyShardedDataParallel*>(module) != nullptr) {
    ops::fail(kOp, "the module is already wrapped in FullyShardedDataParallel", where);
  }
  if (options.shard_param_on_dim_0 && options.flatten_parameters) {
    ops::fail(kOp, "shard_param_on_dim_0 needs flatten_parameters = false", where);
  }
  if (options.compute_dtype && !is_floating(*options.compute_dtype)) {
    ops::fail(
        kOp,
        fmt::format("compute_dtype {} is not a floating dtype", dtype_name(*options.compute_dtype)),
        where);
  }
}

// Every floating buffer of the tree cast to `dtype` (buffer_dtype).
void cast_floating_buffers(nn::Module& module, DType dtype, std::source_location where) {
  const NoGradGuard no_grad;
  for (const auto& [name, t] : module.own_buffers()) {
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) {
      module.replace_buffer(name, cast(t, dtype, where), where);
    }
  }
  for (const auto& [name, child] : module.named_children()) {
    cast_floating_buffers(*child, dtype, where);
  }
}

// Every parameter slot of a wrapped tree outside nested units, tied ones as one, with its value.
struct ParameterSlots {
  std::vector<Slot> slots;
  std::vector<Tensor> values;
  std::unordered_map<const TensorImpl*, std::size_t> index;

  void collect(nn::Module& at, const std::string& prefix) {
    if (dynamic_cast<const FullyShardedDataParallel*>(&at) != nullptr) return;
    for (const auto& [name, t] : at.own_parameters()) {
      if (!t.defined()) continue;
      auto [it, added] = index.emplace(t.impl(), slots.size());
      if (added) {
        slots.push_back(Slot{.shape = dims_of(t), .numel = t.numel()});
        values.push_back(t);
      }
      slots[it->second].homes.emplace_back(&at, name);
      slots[it->second].names.push_back(prefix + name);
    }
    for (const auto& [name, child] : at.named_children()) {
      collect(*child, child_prefix(prefix, name));
    }
  }
};

// The slots of each flat parameter: one per dtype in order of first appearance, or one per
// parameter.
std::vector<std::vector<std::size_t>> flat_groups(const ParameterSlots& p, bool flatten) {
  std::vector<std::vector<std::size_t>> groups;
  if (!flatten) {
    for (std::size_t i = 0; i < p.slots.size(); ++i) groups.push_back({i});
    return groups;
  }
  std::vector<DType> order;
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    const auto at = std::ranges::find(order, p.values[i].dtype());
    if (at == order.end()) {
      order.push_back(p.values[i].dtype());
      groups.push_back({i});
    } else {
      groups[static_cast<std::size_t>(at - order.begin())].push_back(i);
    }
  }
  return groups;
}

// A flat parameter's whole value, padded to `world` equal shards of `shard_rows` rows.
struct PaddedValue {
  Tensor value;
  int64_t shard_rows = 0;
};

// The flat parameter of slots `members` (filling `flat`): the first alone along dim 0 when
// `flat.dim_0`, else every member flattened and concatenated.
PaddedValue pad_flat(const ParameterSlots& p, const std::vector<std::size_t>& members, Flat& flat,
                     int64_t world, std::source_location where) {
  const Tensor& first = p.values[members.front()];
  if (flat.dim_0) {
    const int64_t rows = first.size(0);
    const int64_t padded_rows = (rows + world - 1) / world * world;
    std::vector<int64_t> pad_shape = dims_of(first);
    pad_shape[0] = padded_rows - rows;
    Tensor padded =
        padded_rows == rows
            ? first
            : cat({first, zeros(Shape(pad_shape), first.dtype(), first.device(), where)}, 0, where);
    flat.padded_numel = padded.numel();
    flat.slots.push_back(p.slots[members.front()]);
    return {std::move(padded), padded_rows / world};
  }
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (std::size_t i : members) {
    Slot slot = p.slots[i];
    slot.offset = total;
    total += slot.numel;
    parts.push_back(reshape(p.values[i], {slot.numel}, where));
    flat.slots.push_back(std::move(slot));
  }
  flat.padded_numel = (total + world - 1) / world * world;
  if (flat.padded_numel > total) {
    parts.push_back(
        zeros(Shape({flat.padded_numel - total}), first.dtype(), first.device(), where));
  }
  return {parts.size() == 1 ? parts[0] : cat(parts, 0, where), flat.padded_numel / world};
}

// Block `rank` of the padded value, picked by index_select with the rank as device data: a slice
// at the rank would make each replica's graph another (its bounds are attributes), and graphs
// with collectives must agree; the rank's value does not enter the graph's hash.
Tensor shard_of(const PaddedValue& padded, int64_t world, int rank, std::source_location where) {
  if (world == 1) return padded.value.detach();
  std::vector<int64_t> blocks = dims_of(padded.value);
  blocks[0] = padded.shard_rows;
  blocks.insert(blocks.begin(), world);
  const Tensor at = tensor(std::vector<int64_t>{rank}, Shape({1}), padded.value.device());
  const Tensor picked = index_select(reshape(padded.value, blocks, where), 0, at, where);
  blocks.erase(blocks.begin());
  return reshape(picked, blocks, where).detach();
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                   FsdpOptions options, std::source_location where)
    : module_(std::move(module)),
      options_(std::move(options)),
      world_size_(replica_world_size()),
      rank_(global_ordinal()),
      where_(where) {
  check_wrapping(module_.get(), options_, where);
  if (options_.auto_wrap_policy) {
    ParameterNames all;
    collect_parameter_names(*module_, "", all);
    recursive_wrap(*module_, "", all, options_, where);
  }
  register_module(std::string(kWrapped), module_);
  if (options_.buffer_dtype) cast_floating_buffers(*module_, *options_.buffer_dtype, where);

  ParameterSlots parameters;
  parameters.collect(*module_, "");
  const NoGradGuard no_grad;
  const auto world = static_cast<int64_t>(world_size_);
  for (const auto& members : flat_groups(parameters, options_.flatten_parameters)) {
    auto flat = std::make_shared<Flat>();
    const Tensor& first = parameters.values[members.front()];
    flat->dtype = first.dtype();
    flat->dim_0 = options_.shard_param_on_dim_0 && first.dim() >= 1;
    const PaddedValue padded = pad_flat(parameters, members, *flat, world, where);
    register_parameter(fmt::format("flat_param_{}", flats_.size()),
                       shard_of(padded, world, rank_, where));
    flats_.push_back(std::move(flat));
  }
  uninstall();
}

std::vector<Tensor> FullyShardedDataParallel::shards() const {
  std::vector<Tensor> out;
  for (std::size_t f = 0; f < flats_.size(); ++f) out.push_back(own_parameters()[f].second);
  return out;
}

std::vector<Tensor> FullyShardedDataParallel::gather(const std::vector<Tensor>& shards) const {
  std::vector<Tensor> full;
  for (std::size_t f = 0; f < flats_.size(); ++f) {
    const Flat& flat = *flats_[f];
    Tensor shard = shards[f];
    if (options_.compute_dtype && *options_.compute_dtype != shard.dtype()) {
      shard = cast(shard, *options_.compute_dtype, where_);
    }
    const Tensor gathered = gather_shard(shard, world_size_, where_);
    for (const Slot& slot : flat.slots) {
      if (flat.dim_0) {
        full.push_back(slot.shape[0] == gathered.size(0)
                           ? gathered
                           : slice(gathered, 0, 0, slot.shape[0], 1, where_));
      } else {
        full.push_back(reshape(slice(gathered, 0, slot.offset, slot.offset + slot.numel, 1, where_),
                               slot.shape, where_));
      }
    }
  }
  return full;
}

std::vector<Tensor> FullyShardedDataParallel::reduce_gradients(std::span<const Tensor> param_grads,
                                                               std::span<const Tensor> full) const {
  std::vector<Tensor> out;
  std::size_t i = 0;
  const auto world = static_cast<int64_t>(world_size_);
  for (const auto& flat : flats_) {
    std::vector<Tensor> parts;
    for (const Slot& slot : flat->slots) {
      Tensor g = param_grads[i].defined() ? param_grads[i] : zeros_like(full[i], where_);
      if (g.dtype() != full[i].dtype()) g = cast(g, full[i].dtype(), where_);
      parts.push_back(flat->dim_0 ? g : reshape(g, {slot.numel}, where_));
      ++i;
    }
    // Zeros for the padding: the whole padded flat value (rows of it, sharded on dim 0).
    const Tensor& last = parts.back();
    int64_t have = 0;
    for (const Tensor& part : parts) have += part.numel();
    if (flat->padded_numel > have) {
      std::vector<int64_t> pad{flat->padded_numel - have};
      if (flat->dim_0) {
        pad = dims_of(last);
        int64_t row = 1;
        for (std::size_t d = 1; d < pad.size(); ++d) row *= pad[d];
        pad[0] = row == 0 ? 0 : (flat->padded_numel - have) / row;
      }
      parts.push_back(zeros(Shape(pad), last.dtype(), last.device(), where_));
    }
    const Tensor whole = parts.size() == 1 ? parts[0] : cat(parts, 0, where_);
    // Summed over the replicas and divided by their number: the gradient of the mean of every
    // replica's loss, as one device computes it on the whole batch.
    out.push_back(world == 1
                      ? whole
                      : reduce_scatter(ReduceType::kSum, whole, 1.0 / static_cast<double>(world), 0,
                                       world, {}, where_));
  }
  return out;
}

void FullyShardedDataParallel::install(const std::vector<Tensor>& full) const {
  std::size_t i = 0;
  for (const auto& flat : flats_) {
    for (const Slot& slot : flat->slots) {
      for (const auto& [module, name] : slot.homes)
        module->replace_parameter(name, full[i], where_);
      ++i;
    }
  }
}

void FullyShardedDataParallel::uninstall() const {
  for (const auto& flat : flats_) {
    for (const Slot& slot : flat->slots) {
      for (const auto& [module, name] : slot.homes) module->replace_parameter(name, {}, where_);
    }
  }
}

struct FullyShardedDataParallel::Pass {
  Tensor output;
  std::vector<Tensor> inputs;  // the module's inputs: leaves of the unit's own when recording
  std::vector<Tensor> full;  // the gathered parameters, leaves of the unit's own when recording
};

// The module runs on leaves of the unit's own, so the GradFns it records end at them: the unit's
// backward collects the full parameters' gradients there and reduce-scatters them per flat
// parameter in one go (a gradient through each slice of a gathered flat value would be a
// zero-padded copy of the whole flat value per parameter).
FullyShardedDataParallel::Pass FullyShardedDataParallel::run(
    const std::vector<Tensor>& inputs, const std::vector<Tensor>& shards,
    const std::vector<bool>& inputs_need_grad) {
  struct Depth {
    Depth() { ++this_thread_object<FsdpNesting>().depth; }
    ~Depth() { --this_thread_object<FsdpNesting>().depth; }
  } depth;
  Pass pass;
  {
    const NoGradGuard no_grad;
    pass.full = gather(shards);
  }
  pass.inputs = inputs;
  if (GradMode::is_enabled()) {
    for (Tensor& t : pass.full) {
      t = t.detach();
      t.requires_grad_();
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      pass.inputs[i] = inputs[i].detach();
      if (inputs_need_grad[i]) pass.inputs[i].requires_grad_();
    }
  }
  install(pass.full);
  struct Uninstall {
    const FullyShardedDataParallel& self;
    ~Uninstall() { self.uninstall(); }
  } uninstall_after{*this};
  pass.output = pass.inputs.size() == 1 ? module_->forward(pass.inputs[0])
                                        : module_->forward(pass.inputs[0], pass.inputs[1]);
  return pass;
}

// What a unit's backward needs beyond its edges: [one per input that needs a gradient] [one per
// shard] [others the module read: nested units' shards, tensors it captured].
struct UnitContext {
  FullyShardedDataParallel* unit = nullptr;
  bool recompute = false;
  std::vector<bool> inputs_need_grad;
  std::size_t num_input_edges = 0;  // the inputs that need a gradient
  std::size_t num_shards = 0;
  // Resharded: the inputs the forward pass runs again on, and its random state.
  std::vector<Tensor> inputs;
  std::vector<Tensor> shards;
  std::unordered_map<int, RngState> rng;
  bool autocast = false;  // the autocast state the first run had (backward runs outside it)
  DType autocast_dtype = DType::kBFloat16;
  // Kept: the first run, with its recorded graph.
  Tensor output;
  std::vector<Tensor> own_inputs;
  std::vector<Tensor> full;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::source_location where;
};

struct FsdpUnitBackward {
  static void apply(const GradFn& fn, const Tensor& grad, autograd::GradList& grads) {
    const auto& ctx = *static_cast<const UnitContext*>(fn.context().get());
    FullyShardedDataParallel& unit = *ctx.unit;
    Tensor output = ctx.output;
    std::vector<Tensor> own_inputs = ctx.own_inputs;
    std::vector<Tensor> full = ctx.full;
    Tensor grad_output = grad;
    if (ctx.recompute) {
      // The input, the shards and the incoming gradient through one barrier: the gather and the
      // forward pass run again when the backward pass gets here, on values no pass identifies
      // with the first run's, so CSE cannot merge them and the first gather is freed after the
      // forward pass.
      std::vector<Tensor> barrier;
      for (const Tensor& t : ctx.inputs) barrier.push_back(t.detach());
      for (const Tensor& s : ctx.shards) barrier.push_back(s.detach());
      barrier.push_back(grad.detach());
      optimization_barrier_(barrier, ctx.where);
      grad_output = barrier.back();
      TraceContext& trace = TraceContext::current();
      std::unordered_map<int, RngState> now = trace.rng_states();
      trace.set_rng_states(ctx.rng);
      struct RestoreRng {
        TraceContext& trace;
        std::unordered_map<int, RngState>& now;
        ~RestoreRng() { trace.set_rng_states(std::move(now)); }
      } restore{trace, now};
      const autocast region(Device{}, ctx.autocast_dtype, ctx.autocast);
      AutoGradMode grad_mode(true);
      const auto shards_at = barrier.begin() + static_cast<std::ptrdiff_t>(ctx.inputs.size());
      FullyShardedDataParallel::Pass pass =
          unit.run(std::vector<Tensor>(barrier.begin(), shards_at),
                   std::vector<Tensor>(shards_at, barrier.end() - 1), ctx.inputs_need_grad);
      output = pass.output;
      own_inputs = std::move(pass.inputs);
      full = std::move(pass.full);
      if (!output.defined() || output.dtype() != ctx.dtype || !(output.shape() == ctx.shape) ||
          !output.requires_grad()) {
        ops::fail(kOp,
                  fmt::format("the wrapped module's forward in the backward pass gave {} where "
                              "its first run gave {}: it must compute the same thing both times",
                              output.defined() ? ops::describe(output) : "an undefined tensor",
                              ops::describe(ctx.dtype, ctx.shape)),
                  ctx.where);
      }
    }
    std::vector<GradEdge> targets;
    for (std::size_t i = 0; i < own_inputs.size(); ++i) {
      if (ctx.inputs_need_grad[i]) targets.push_back(autograd::gradient_edge(own_inputs[i]));
    }
    for (const Tensor& t : full) targets.push_back(autograd::gradient_edge(t));
    const std::span<const GradEdge> edges = fn.edges();
    const std::size_t own_edges = ctx.num_input_edges + ctx.num_shards;
    targets.insert(targets.end(), edges.begin() + static_cast<std::ptrdiff_t>(own_edges),
                   edges.end());
    const autograd::GradList got = autograd::gradients_at(output, grad_output, targets, ctx.where);
    std::size_t at = 0;
    for (; at < ctx.num_input_edges; ++at) grads[at] = got[at];
    const std::vector<Tensor> shard_grads = unit.reduce_gradients(
        std::span<const Tensor>(got.begin() + static_cast<std::ptrdiff_t>(at), full.size()), full);
    at += full.size();
    std::size_t edge = ctx.num_input_edges;
    for (const Tensor& g : shard_grads) grads[edge++] = g;
    for (; at < got.size(); ++at) grads[edge++] = got[at];
  }
};

namespace {
const autograd::Derivative kFsdpUnitBackward{"FsdpUnitBackward", FsdpUnitBackward::apply};
}  // namespace

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  ops::require_defined(kOp, input, "the input", where_);
  return forward_inputs({input});
}

Tensor FullyShardedDataParallel::forward(const Tensor& input, const Tensor& other) {
  ops::require_defined(kOp, input, "the first input", where_);
  ops::require_defined(kOp, other, "the second input", where_);
  return forward_inputs({input, other});
}

Tensor FullyShardedDataParallel::forward_inputs(const std::vector<Tensor>& inputs) {
  const std::vector<Tensor> own = shards();
  if (!GradMode::is_enabled()) return run(inputs, own, std::vector<bool>(inputs.size())).output;
  const bool root = this_thread_object<FsdpNesting>().depth == 0;
  auto ctx = std::make_shared<UnitContext>();
  ctx->unit = this;
  ctx->recompute = !root && options_.reshard_after_forward;
  for (const Tensor& t : inputs) {
    ctx->inputs_need_grad.push_back(t.requires_grad());
    if (t.requires_grad()) ++ctx->num_input_edges;
  }
  ctx->num_shards = own.size();
  ctx->where = where_;
  if (ctx->recompute) {
    ctx->rng = TraceContext::current().rng_states();
    ctx->autocast = is_autocast_enabled();
    ctx->autocast_dtype = get_autocast_dtype();
  }
  const uint64_t first_recorded = GradFn::peek_sequence_nr();
  Pass pass = run(inputs, own, ctx->inputs_need_grad);
  if (!pass.output.defined())
    ops::fail(kOp, "the wrapped module returned an undefined tensor", where_);
  if (!pass.output.requires_grad()) return pass.output;

  auto grad_fn = make_intrusive<GradFn>(kFsdpUnitBackward);
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) grad_fn->add_input(t, autograd::gradient_edge(t));
  }
  for (const Tensor& s : own) grad_fn->add_input(s, autograd::gradient_edge(s));
  // The GradFns the module recorded have sequence numbers from first_recorded on; an edge out of
  // them to anything but the unit's own leaves is an edge of the unit (as in checkpoint()).
  std::unordered_set<const TensorImpl*> own_leaves;
  for (const Tensor& t : pass.inputs) own_leaves.insert(t.impl());
  for (const Tensor& t : pass.full) own_leaves.insert(t.impl());
  autograd::add_edges_leaving(*grad_fn, pass.output, own_leaves, first_recorded);
  ctx->dtype = pass.output.dtype();
  ctx->shape = pass.output.shape();
  if (ctx->recompute) {
    ctx->inputs = inputs;
    ctx->shards = own;
  } else {
    ctx->output = pass.output;
    ctx->own_inputs = pass.inputs;
    ctx->full = pass.full;
  }
  grad_fn->set_context(std::move(ctx));
  Tensor result = pass.output.detach();
  AutogradMeta& meta = result.impl()->autograd_or_create();
  meta.requires_grad = true;
  meta.grad_fn = std::move(grad_fn);
  return result;
}

}  // namespace axle
