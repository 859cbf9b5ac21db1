// graph: autocast's per-thread state and its scoped region.
#include "axle/graph/autocast.h"

#include <fmt/format.h>

#include <stdexcept>

#include "axle/graph/trace_context.h"

namespace axle {
namespace {

const char* basename(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

void require_lower_precision(DType dtype, const std::source_location& where) {
  if (dtype == DType::kBFloat16) return;
  throw std::invalid_argument(fmt::format(
      "autocast: dtype {} is not a lower-precision floating dtype; bf16 is the one "
      "autocast runs in (at {}:{} in {})",
      dtype_name(dtype), basename(where.file_name()), where.line(), where.function_name()));
}

}  // namespace

bool is_autocast_enabled() noexcept {
  const TraceContext* context = TraceContext::current_if_any();
  return context != nullptr && context->autocast_enabled();
}

DType get_autocast_dtype() noexcept {
  const TraceContext* context = TraceContext::current_if_any();
  return context == nullptr ? DType::kBFloat16 : context->autocast_dtype();
}

void set_autocast_enabled(bool enabled) { TraceContext::current().set_autocast_enabled(enabled); }

void set_autocast_dtype(DType dtype, std::source_location where) {
  require_lower_precision(dtype, where);
  TraceContext::current().set_autocast_dtype(dtype);
}

autocast::autocast(Device /*device*/, DType dtype, bool enabled, std::source_location where)
    : previous_enabled_(is_autocast_enabled()), previous_dtype_(get_autocast_dtype()) {
  // As torch: a disabled region leaves the dtype alone; an enabled one must name a usable dtype.
  if (enabled) require_lower_precision(dtype, where);
  TraceContext& context = TraceContext::current();
  context.set_autocast_enabled(enabled);
  if (enabled) context.set_autocast_dtype(dtype);
}

autocast::~autocast() {
  TraceContext& context = TraceContext::current();
  context.set_autocast_enabled(previous_enabled_);
  context.set_autocast_dtype(previous_dtype_);
}

}  // namespace axle
