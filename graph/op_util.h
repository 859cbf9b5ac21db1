// graph: what every op's tracing shares — error messages with the caller's line, NumPy
// broadcasting, dtype promotion, scalars as parameters, and building the result tensor.
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "axle/graph/ir.h"
#include "axle/graph/ops.h"
#include "axle/graph/tensor.h"

namespace axle::ops {

/// "f32[2,3]" — a tensor's logical dtype and shape, as errors print it.
std::string describe(const Tensor& t);
std::string describe(DType dtype, const Shape& shape);

/// Throws ShapeError: "<op>: <detail> (at file:line in function)".
[[noreturn]] void fail(std::string_view op, const std::string& detail, const Loc& where);

/// Throws unless `t` is defined.
void require_defined(std::string_view op, const Tensor& t, const char* name, const Loc& where);
/// Throws unless `t` (defined) is floating-point: ops torch refuses integers and preds for.
void require_floating(std::string_view op, const Tensor& t, const Loc& where);
/// Throws unless every tensor is on the same device; returns it.
Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors,
                     const Loc& where);

/// NumPy broadcast of two shapes, or ShapeError naming both.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b, const Loc& where,
                       const Tensor* ta = nullptr, const Tensor* tb = nullptr);

/// Dim `d` of `x`, negative counting from the end; ShapeError naming `x` if out of range:
/// "dim 3 is out of range for f32[2,3] (expected -2..1)". `rank` is the rank the dim counts in:
/// x's, or one more for ops that insert a dim. A 0-d tensor takes dim 0 and -1, as torch.
int64_t normalize_dim(std::string_view op, const Tensor& x, int64_t d, int rank, const Loc& where);

/// The dtype a logical dtype is stored in on the device (XLA_USE_BF16, XLA_DOWNCAST_BF16).
DType storage_dtype(DType logical);
/// Re-reads XLA_USE_BF16 / XLA_DOWNCAST_BF16 / XLA_NO_SPECIAL_SCALARS (tests).
void reload_dtype_config();

/// The IR value of `t`, cast to storage dtype `to` when it differs.
NodePtr value_as(const Tensor& t, DType logical_to, const Loc& where);
/// A 0-d scalar in logical dtype `dtype`: a constant for 0 and 1 (unless
/// XLA_NO_SPECIAL_SCALARS=1), else a parameter.
NodePtr scalar(double value, DType dtype, const Loc& where);
/// A scalar parameter, whatever its value (0 and 1 too): for values that change between steps.
NodePtr parameter(double value, DType dtype, const Loc& where = Loc::current());

/// The dtype the calling thread's autocast region runs lower-precision ops in, or nullopt
/// outside a region (graph/autocast.h).
[[nodiscard]] std::optional<DType> autocast_dtype() noexcept;
/// `t` as an autocast policy hands it to an op: cast to `dtype` when it is floating, not f64
/// (autocast leaves f64 alone, as torch's) and not already `dtype`; otherwise `t` itself.
[[nodiscard]] Tensor autocast_cast(const Tensor& t, DType dtype, const Loc& where);

/// Turns autocast off on the calling thread for its scope: an op on autocast's lists runs on
/// the operands its policy cast, and the ops it is made of trace as they are, as torch's autocast
/// wrappers run the op below the autocast dispatch key. backward() traces under one too.
class AutocastSuspended {
 public:
  AutocastSuspended();
  ~AutocastSuspended();
  AutocastSuspended(const AutocastSuspended&) = delete;
  AutocastSuspended& operator=(const AutocastSuspended&) = delete;

 private:
  bool previous_;
};

/// Builds the result tensor of a traced op (counts `xla::<op>`, tells the runtime's observer).
Tensor make_result(Op op, DType logical_dtype, const Shape& shape, Operands operands, Device device,
                   const Loc& where, IntAttrs ints = {}, RealAttrs reals = {});

}  // namespace axle::ops
