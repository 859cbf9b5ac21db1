// graph: automatic mixed precision regions, as torch.autocast("xla", dtype=torch.bfloat16) and
// torch_xla.amp.autocast. The state is part of the calling thread's TraceContext, so each replica
// has its own; ops consult it as they trace (graph/op_util.h), and nothing of it reaches the
// IR except the casts it adds.
#pragma once

#include <source_location>

#include "axle/engine/dtype.h"
#include "axle/graph/device.h"

namespace axle {

/// Whether an autocast region is on on the calling thread (torch.is_autocast_enabled("xla")).
[[nodiscard]] bool is_autocast_enabled() noexcept;
/// The dtype autocast runs matmul-family ops in on the calling thread
/// (torch.get_autocast_dtype("xla")): bf16 unless a region asked for another.
[[nodiscard]] DType get_autocast_dtype() noexcept;
/// Turns autocast on or off on the calling thread (torch.set_autocast_enabled("xla", enabled)),
/// until changed again; `autocast` is the scoped form.
void set_autocast_enabled(bool enabled);
/// Sets the calling thread's autocast dtype (torch.set_autocast_dtype("xla", dtype)); bf16 is the
/// one lower-precision floating dtype axle has, anything else throws std::invalid_argument.
void set_autocast_dtype(DType dtype, std::source_location where = std::source_location::current());

/// A mixed-precision region for its scope (torch.autocast("xla", dtype, enabled);
/// torch_xla.amp.autocast(device, enabled, dtype)), named as torch names it. Inside, on this
/// thread:
/// - matmul, linear, conv2d, relu and max_pool2d (PyTorch/XLA's lower-precision list, for the
///   ops axle has) cast their f32 operands to `dtype` and give `dtype` results; the kernels
///   accumulate in f32;
/// - softmax, log_softmax, logsumexp, sum, cumsum, exp, log, pow, rsqrt, layer_norm,
///   BatchNorm2d, nll_loss, cross_entropy and mse_loss (PyTorch's f32 list) cast bf16 operands
///   to f32 and give f32 results;
/// - every other op follows type promotion (bf16 with f32 gives f32).
/// f64 tensors are never cast. A cast's gradient is cast back, so gradients reaching f32
/// parameters are f32. backward() traces the gradients outside the region, in the dtypes the
/// forward pass used, wherever it is called. Regions nest: a region restores the state it found,
/// and `enabled = false` turns autocast off inside an enclosing one. `device` says which device
/// type the region is for; every axle device is an "xla" device, so any of them will do.
class autocast {  // NOLINT(readability-identifier-naming): torch.autocast's name
 public:
  /// Enters the region: autocast on in `dtype`, or off when !enabled. An enabled region's dtype
  /// must be bf16; another throws std::invalid_argument naming `where`.
  explicit autocast(Device device = {}, DType dtype = DType::kBFloat16, bool enabled = true,
                    std::source_location where = std::source_location::current());
  /// Leaves the region, restoring the autocast state and dtype it found.
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

}  // namespace axle
