// graph: what every op's tracing shares (see op_util.h).
#include "axle/graph/op_util.h"
#include "axle/graph/graph_settings.h"

#include <fmt/format.h>

#include <array>
#include <atomic>

#include "axle/engine/metrics.h"
#include "axle/graph/tensor_runtime.h"
#include "axle/graph/trace_context.h"

namespace axle::ops {
namespace {

config::DTypeSettings& dtype_config() {
  static config::DTypeSettings settings = config::read_dtype_settings();
  return settings;
}

Counter& op_counter(Op op) {
  static std::array<std::atomic<Counter*>, static_cast<std::size_t>(Op::kCount)> counters{};
  auto& slot = counters[static_cast<std::size_t>(op)];
  Counter* c = slot.load(std::memory_order_acquire);
  if (!c) {
    c = &counter(fmt::format("xla::{}", op_name(op)));
    slot.store(c, std::memory_order_release);
  }
  return *c;
}

const char* basename(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

}  // namespace

std::string describe(DType dtype, const Shape& shape) {
  return fmt::format("{}{}", dtype_name(dtype), shape.to_string());
}

std::string describe(const Tensor& t) { return describe(t.dtype(), t.shape()); }

void fail(std::string_view op, const std::string& detail, const Loc& where) {
  throw ShapeError(fmt::format("{}: {} (at {}:{} in {})", op, detail, basename(where.file_name()),
                               where.line(), where.function_name()));
}

void require_defined(std::string_view op, const Tensor& t, const char* name, const Loc& where) {
  if (!t.defined()) fail(op, fmt::format("{} is an undefined tensor", name), where);
}

void require_floating(std::string_view op, const Tensor& t, const Loc& where) {
  if (!is_floating(t.dtype())) {
    fail(op, fmt::format("needs a floating-point tensor, not {}", describe(t)), where);
  }
}

Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors,
                     const Loc& where) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else if (!(t->device() == first->device())) {
      fail(op,
           fmt::format("operands are on different devices ({} and {})", first->device().to_string(),
                       t->device().to_string()),
           where);
    }
  }
  return first ? first->device() : Device{};
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b, const Loc& where,
                       const Tensor* ta, const Tensor* tb) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      fail(op,
           fmt::format("shapes {} and {} cannot broadcast (dim {}: {} vs {})",
                       ta ? describe(*ta) : a.to_string(), tb ? describe(*tb) : b.to_string(), i,
                       da, db),
           where);
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

int64_t normalize_dim(std::string_view op, const Tensor& x, int64_t d, int rank, const Loc& where) {
  const int64_t bound = std::max(rank, 1);
  if (d < -bound || d >= bound) {
    fail(op,
         fmt::format("dim {} is out of range for {} (expected {}..{})", d, describe(x), -bound,
                     bound - 1),
         where);
  }
  return d < 0 ? d + bound : d;
}

DType storage_dtype(DType logical) {
  const config::DTypeSettings& cfg = dtype_config();
  if (cfg.use_bf16 && (logical == DType::kFloat32 || logical == DType::kFloat64))
    return DType::kBFloat16;
  if (cfg.downcast_bf16) {
    if (logical == DType::kFloat32) return DType::kBFloat16;
    if (logical == DType::kFloat64) return DType::kFloat32;
  }
  return logical;
}

void reload_dtype_config() { dtype_config() = config::read_dtype_settings(); }

NodePtr value_as(const Tensor& t, DType logical_to, const Loc& where) {
  NodePtr node = t.impl()->value_node(where);
  const DType to = storage_dtype(logical_to);
  if (node->dtype() == to) return node;
  return make_intrusive<Node>(Op::kCast, to, node->shape(), Operands{node}, IntAttrs{}, RealAttrs{},
                              where);
}

NodePtr scalar(double value, DType dtype, const Loc& where) {
  const DType storage = storage_dtype(dtype);
  if ((value == 0 || value == 1) && !dtype_config().no_special_scalars) {
    return Node::constant(storage, value, where);
  }
  return Node::parameter(storage, value, where);
}

NodePtr parameter(double value, DType dtype, const Loc& where) {
  return Node::parameter(storage_dtype(dtype), value, where);
}

Tensor make_result(Op op, DType logical_dtype, const Shape& shape, Operands operands, Device device,
                   const Loc& where, IntAttrs ints, RealAttrs reals) {
  op_counter(op).add(1);
  auto node = make_intrusive<Node>(op, storage_dtype(logical_dtype), shape, std::move(operands),
                                   std::move(ints), std::move(reals), where);
  Tensor result(make_intrusive<TensorImpl>(logical_dtype, std::move(node), device));
  TraceContext::current().count_node();
  if (TensorRuntime* runtime = tensor_runtime()) runtime->after_op(result, where);
  return result;
}

std::optional<DType> autocast_dtype() noexcept {
  const TraceContext* context = TraceContext::current_if_any();
  if (context == nullptr || !context->autocast_enabled()) [[likely]] {
    return std::nullopt;
  }
  return context->autocast_dtype();
}

Tensor autocast_cast(const Tensor& t, DType dtype, const Loc& where) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::kFloat64 ||
      t.dtype() == dtype) {
    return t;
  }
  return cast(t, dtype, where);
}

AutocastSuspended::AutocastSuspended() {
  TraceContext* context = TraceContext::current_if_any();
  previous_ = context != nullptr && context->autocast_enabled();
  if (previous_) context->set_autocast_enabled(false);
}

AutocastSuspended::~AutocastSuspended() {
  if (previous_) TraceContext::current().set_autocast_enabled(true);
}

}  // namespace axle::ops
