// graph/ops: tensors made on the device from a value, not from host data.
#include <fmt/format.h>
#include <cmath>

#include "axle/graph/op_util.h"

namespace axle {

Tensor full(const Shape& shape, double value, DType dtype, Device device, Loc where) {
  for (int64_t d : shape.dims()) {
    if (d < 0)
      ops::fail("full", fmt::format("negative dimension in shape {}", shape.to_string()), where);
  }
  // A broadcast scalar: the value is a parameter (or the constant 0 or 1), never an attribute,
  // so a new fill value does not recompile.
  return ops::make_result(Op::kExpand, dtype, shape, Operands{ops::scalar(value, dtype, where)},
                          device, where);
}

Tensor zeros(const Shape& shape, DType dtype, Device device, Loc where) {
  return full(shape, 0, dtype, device, where);
}
Tensor ones(const Shape& shape, DType dtype, Device device, Loc where) {
  return full(shape, 1, dtype, device, where);
}
Tensor zeros_like(const Tensor& t, Loc where) {
  ops::require_defined("zeros_like", t, "the operand", where);
  return full(t.shape(), 0, t.dtype(), t.device(), where);
}
Tensor ones_like(const Tensor& t, Loc where) {
  ops::require_defined("ones_like", t, "the operand", where);
  return full(t.shape(), 1, t.dtype(), t.device(), where);
}

Tensor scalar_tensor(double value, DType dtype, Device device, Loc where) {
  return Tensor(make_intrusive<TensorImpl>(dtype, ops::scalar(value, dtype, where), device));
}

Tensor arange(double start, double end, double step, DType dtype, Device device, Loc where) {
  if (step == 0) ops::fail("arange", "step must be non-zero", where);
  if ((end - start) / step < 0) {
    ops::fail("arange",
              fmt::format("the range [{}, {}) is empty going in steps of {}", start, end, step),
              where);
  }
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return ops::make_result(Op::kIota, dtype, Shape{n}, Operands{}, device, where, IntAttrs{},
                          RealAttrs{start, step});
}

}  // namespace axle
