// graph/ops: in-place value replacement (Tensor::copy_).
#include <fmt/format.h>

#include "axle/graph/autograd.h"
#include "axle/graph/op_util.h"

namespace axle {

const Tensor& Tensor::copy_(const Tensor& value, Loc where) const {
  ops::require_defined("copy_", *this, "the destination", where);
  ops::require_defined("copy_", value, "the value", where);
  ops::common_device("copy_", {this, &value}, where);
  if (GradMode::is_enabled() && (requires_grad() || value.requires_grad())) {
    // Autograd does not follow in-place replacement: say so instead of dropping gradients.
    ops::fail("copy_",
              "an in-place copy into or from a tensor that requires grad needs NoGradGuard (as "
              "torch under no_grad): autograd does not record it",
              where);
  }
  Tensor v = value;
  if (!(v.shape() == shape())) {
    if (!(ops::broadcast_shapes("copy_", shape(), v.shape(), where, this, &v) == shape())) {
      ops::fail("copy_",
                fmt::format("a value of shape {} does not broadcast to the destination {}",
                            ops::describe(v), ops::describe(*this)),
                where);
    }
    const std::span<const int64_t> dims = shape().dims();
    v = expand(v, std::vector<int64_t>(dims.begin(), dims.end()), where);
  }
  if (v.dtype() != dtype()) v = cast(v, dtype(), where);
  if (v.impl() == impl()) return *this;
  if (v.impl()->pending_ir()) {
    impl()->set_ir(v.impl()->ir());
  } else {
    impl()->set_data(v.impl()->data());  // both now read the same data; nothing to trace
  }
  return *this;
}

}  // namespace axle
