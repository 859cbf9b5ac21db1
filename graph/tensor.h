// graph: the lazy Tensor. A Tensor is a cheap handle to either device data or a pending IR value;
// ops on it only trace. Reading its value (item, cpu) and creating it from host data need the
// devices: those members are declared here and defined by actors/ (the layer that has devices).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/future.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/shape.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/device.h"
#include "axle/graph/device_data.h"
#include "axle/graph/ir.h"

namespace axle {

class PendingTensors;

/// A tensor's autograd state (graph/autograd/function.h).
struct AutogradMeta;
/// Deletes an AutogradMeta where its type is complete, so this header needs only its name.
struct AutogradMetaDeleter {
  /// Deletes `meta`.
  void operator()(AutogradMeta* meta) const noexcept;
};

/// The element type a C++ type maps to.
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::kFloat64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kInt64;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::kBool;
  else if constexpr (std::is_same_v<T, Half>)
    return DType::kFloat16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DType::kInt8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::kUInt8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return DType::kInt16;
  else
    static_assert(sizeof(T) == 0, "unsupported element type");
}

/// The state behind a Tensor handle: a logical dtype and shape, and either a pending IR value or
/// device data. Handles share it, so an in-place op is seen through every handle.
class TensorImpl final : public RefCounted {
 public:
  /// A pending value computed by `ir`; tracked by the calling thread's trace context.
  TensorImpl(DType logical_dtype, NodePtr ir, Device device);
  /// A value held in `data`.
  TensorImpl(DType logical_dtype, IntrusivePtr<DeviceData> data);
  ~TensorImpl() override;

  /// The logical dtype: what the tensor reports, whatever dtype stores it on the device.
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  /// The dims.
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  /// The device the value is on.
  [[nodiscard]] Device device() const noexcept { return device_; }
  /// The pending IR value, or null while the tensor holds device data.
  [[nodiscard]] const NodePtr& ir() const noexcept { return ir_; }
  /// The device data holding the value, or null while the value is pending IR.
  [[nodiscard]] const IntrusivePtr<DeviceData>& data() const noexcept { return data_; }
  /// Whether the value is pending IR (not yet executed) rather than device data.
  [[nodiscard]] bool pending_ir() const noexcept { return static_cast<bool>(ir_); }

  /// The IR value an op consumes: the pending node, or a device-data leaf for the data (one per
  /// data, so using a tensor twice in a graph reads one input).
  [[nodiscard]] NodePtr value_node(SourceLocation where);

  /// Gives the tensor a new pending value (in-place ops); it joins the live pending tensors.
  void set_ir(NodePtr ir);
  /// Binds the tensor to data (what mark_step does to the tensors it executes).
  void set_data(IntrusivePtr<DeviceData> data);
  /// Binds the tensor to data on another device (Module::to: every handle sees the move).
  void move_to(IntrusivePtr<DeviceData> data);

  /// The tensor's SPMD sharding as a key of intern_sharding (graph/spmd.h), or -1 for none. It
  /// outlives the tensor's values: a parameter keeps it across steps, and the device-data leaf
  /// of its data carries it (so the leaf's hash covers it).
  [[nodiscard]] int64_t sharding() const noexcept { return sharding_; }
  /// Records `sharding` (or none, -1); a device-data leaf made before is made again with it.
  void set_sharding(int64_t sharding) noexcept {
    sharding_ = sharding;
    leaf_ = {};
  }

  /// Tensors alive in the process right now.
  [[nodiscard]] static int64_t live_count() noexcept;

  /// The tensor's autograd state, or null while it takes no part in autograd (most tensors:
  /// ops test this pointer before doing any autograd work).
  [[nodiscard]] AutogradMeta* autograd() const noexcept { return autograd_.get(); }
  /// The autograd state, created on first use (graph/autograd/).
  AutogradMeta& autograd_or_create();

 private:
  friend class PendingTensors;
  DType dtype_;
  Shape shape_;
  Device device_;
  NodePtr ir_;
  IntrusivePtr<DeviceData> data_;
  NodePtr leaf_;
  int64_t sharding_ = -1;
  // Membership in its thread's list of tensors with pending IR.
  IntrusivePtr<PendingTensors> pending_;
  TensorImpl* prev_ = nullptr;
  TensorImpl* next_ = nullptr;
  std::unique_ptr<AutogradMeta, AutogradMetaDeleter> autograd_;
};

/// Host copy of a tensor's value, in its logical dtype.
struct CpuTensor {
  DType dtype = DType::kFloat32;  ///< the elements' dtype
  Shape shape;                    ///< the dims
  std::vector<std::byte> bytes;   ///< row-major elements

  /// An f32 of shape [] with no bytes yet.
  CpuTensor() = default;
  /// `bytes` as the row-major elements of `dtype` in `shape`, taken as they are (unchecked).
  CpuTensor(DType dtype, const Shape& shape, std::vector<std::byte> bytes = {})
      : dtype(dtype), shape(shape), bytes(std::move(bytes)) {}
  /// The elements `values` (row-major) in T's dtype, as torch::tensor(values).reshape(shape):
  /// CpuTensor(std::vector<float>{1, 2, 3, 4}, {2, 2}). A scalar takes shape {}. Throws
  /// std::invalid_argument naming both when the count does not fill the shape.
  template <class T>
  CpuTensor(std::span<const T> values, const Shape& shape)
      : CpuTensor(dtype_of<T>(), shape, copy_elements(std::as_bytes(values), shape, sizeof(T))) {}
  /// As above, from a std::vector.
  template <class T>
  CpuTensor(const std::vector<T>& values, const Shape& shape)
      : CpuTensor(std::span<const T>(values), shape) {}
  /// As above, from a braced list of values.
  template <class T>
  CpuTensor(std::initializer_list<T> values, const Shape& shape)
      : CpuTensor(std::span<const T>(values.begin(), values.size()), shape) {}

  /// The elements converted to T (bf16 reads as float; T = Half reads f16 exactly).
  template <class T>
  [[nodiscard]] std::vector<T> values() const;

 private:
  // The bytes, after checking that they hold shape.numel() elements of their size.
  static std::vector<std::byte> copy_elements(std::span<const std::byte> bytes, const Shape& shape,
                                              std::size_t element_size);
};

/// A lazy tensor handle (cheap to copy; copies share the value).
class Tensor {
 public:
  /// An undefined tensor: defined() is false.
  Tensor() = default;
  /// A handle to `impl`.
  explicit Tensor(IntrusivePtr<TensorImpl> impl) noexcept : impl_(std::move(impl)) {}

  /// Whether the handle refers to a tensor, as torch's x.defined().
  [[nodiscard]] bool defined() const noexcept { return static_cast<bool>(impl_); }
  /// The (logical) element type, as torch's x.dtype().
  [[nodiscard]] DType dtype() const { return impl_->dtype(); }
  /// The dims, as torch's x.shape.
  [[nodiscard]] const Shape& shape() const { return impl_->shape(); }
  /// The number of dims, as torch's x.dim().
  [[nodiscard]] int dim() const { return impl_->shape().rank(); }
  /// Size of dimension `d` (negative counts from the end).
  [[nodiscard]] int64_t size(int d) const;
  /// The number of elements, as torch's x.numel().
  [[nodiscard]] int64_t numel() const { return impl_->shape().numel(); }
  /// The device the tensor is on, as torch's x.device.
  [[nodiscard]] Device device() const { return impl_->device(); }
  /// The state behind the handle; null when undefined.
  [[nodiscard]] TensorImpl* impl() const noexcept { return impl_.get(); }
  /// As impl(), as the owning reference.
  [[nodiscard]] const IntrusivePtr<TensorImpl>& impl_ptr() const noexcept { return impl_; }
  /// Moves the handle's reference out, leaving the handle undefined.
  [[nodiscard]] IntrusivePtr<TensorImpl> take_impl() noexcept { return std::move(impl_); }

  /// Gives this tensor `value`'s value (broadcast to this shape and cast to this dtype), in
  /// place: every handle sees it, and what else the tensor carries stays, as torch's copy_.
  /// Traces only; parameters and optimizer state are updated this way.
  const Tensor& copy_(const Tensor& value,
                      std::source_location where = std::source_location::current()) const;
  /// This tensor on `device`: itself when it is there, else a copy through the host (defined in
  /// actors/; reads the value).
  [[nodiscard]] Tensor to(Device device,
                          std::source_location where = std::source_location::current()) const;

  // --- libtorch's methods: each is the free function of its name in graph/ops.h (defined
  // in graph/ops/tensor_methods.cpp) ---

  /// This tensor cast to `dtype` (itself when it has it already), as torch's x.to(dtype).
  [[nodiscard]] Tensor to(DType dtype,
                          std::source_location where = std::source_location::current()) const;
  /// The product with the matrix `other`; both must be 2-d, as torch's x.mm(other).
  [[nodiscard]] Tensor mm(const Tensor& other,
                          std::source_location where = std::source_location::current()) const;
  /// The product with `other`, batch dims broadcast, as torch's x.matmul(other).
  [[nodiscard]] Tensor matmul(const Tensor& other,
                              std::source_location where = std::source_location::current()) const;
  /// The 2-d (or lower) tensor transposed, as torch's x.t().
  [[nodiscard]] Tensor t(std::source_location where = std::source_location::current()) const;
  /// Dims `dim0` and `dim1` swapped, as torch's x.transpose(dim0, dim1).
  [[nodiscard]] Tensor transpose(
      int64_t dim0, int64_t dim1,
      std::source_location where = std::source_location::current()) const;
  /// The dims reordered to `dims`, as torch's x.permute(dims).
  [[nodiscard]] Tensor permute(std::vector<int64_t> dims,
                               std::source_location where = std::source_location::current()) const;
  /// The same elements in `shape` (one dim may be -1), as torch's x.reshape(shape).
  [[nodiscard]] Tensor reshape(std::vector<int64_t> shape,
                               std::source_location where = std::source_location::current()) const;
  /// Same as reshape(), as torch's x.view(shape).
  [[nodiscard]] Tensor view(std::vector<int64_t> shape,
                            std::source_location where = std::source_location::current()) const;
  /// Dims `start_dim` to `end_dim` merged into one, as torch's x.flatten(start_dim, end_dim).
  [[nodiscard]] Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1,
                               std::source_location where = std::source_location::current()) const;
  /// A dim of size 1 inserted at `dim`, as torch's x.unsqueeze(dim).
  [[nodiscard]] Tensor unsqueeze(
      int64_t dim, std::source_location where = std::source_location::current()) const;
  /// Dim `dim` removed if its size is 1 (else the same dims), as torch's x.squeeze(dim).
  [[nodiscard]] Tensor squeeze(int64_t dim,
                               std::source_location where = std::source_location::current()) const;
  /// Over `dims` (every dim when empty), as torch's x.sum(dims, keepdim).
  [[nodiscard]] Tensor sum(std::vector<int64_t> dims = {}, bool keepdim = false,
                           std::source_location where = std::source_location::current()) const;
  /// The mean over `dims` (every dim when empty) of a floating-point tensor, as torch's
  /// x.mean(dims, keepdim).
  [[nodiscard]] Tensor mean(std::vector<int64_t> dims = {}, bool keepdim = false,
                            std::source_location where = std::source_location::current()) const;
  /// Index (s64) of the first maximum along `dim`, or in the flattened tensor without one, as
  /// torch's x.argmax(dim, keepdim).
  [[nodiscard]] Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                              std::source_location where = std::source_location::current()) const;
  /// The maximum over `dims` (every dim when empty), as torch's x.amax(dims, keepdim).
  [[nodiscard]] Tensor amax(std::vector<int64_t> dims = {}, bool keepdim = false,
                            std::source_location where = std::source_location::current()) const;
  /// The minimum over `dims` (every dim when empty), as torch's x.amin(dims, keepdim).
  [[nodiscard]] Tensor amin(std::vector<int64_t> dims = {}, bool keepdim = false,
                            std::source_location where = std::source_location::current()) const;
  /// Softmax along `dim`, as torch's x.softmax(dim).
  [[nodiscard]] Tensor softmax(int64_t dim,
                               std::source_location where = std::source_location::current()) const;
  /// log(softmax) along `dim`, as torch's x.log_softmax(dim).
  [[nodiscard]] Tensor log_softmax(
      int64_t dim, std::source_location where = std::source_location::current()) const;
  /// e^x elementwise, as torch's x.exp(); integers give f32.
  [[nodiscard]] Tensor exp(std::source_location where = std::source_location::current()) const;
  /// The natural logarithm, as torch's x.log(); integers give f32.
  [[nodiscard]] Tensor log(std::source_location where = std::source_location::current()) const;
  /// The square root, as torch's x.sqrt(); integers give f32.
  [[nodiscard]] Tensor sqrt(std::source_location where = std::source_location::current()) const;
  /// The absolute value, as torch's x.abs().
  [[nodiscard]] Tensor abs(std::source_location where = std::source_location::current()) const;
  /// -x, as torch's x.neg().
  [[nodiscard]] Tensor neg(std::source_location where = std::source_location::current()) const;
  /// max(x, 0), as torch's x.relu().
  [[nodiscard]] Tensor relu(std::source_location where = std::source_location::current()) const;
  /// 1 / (1 + e^-x), as torch's x.sigmoid(); integers give f32.
  [[nodiscard]] Tensor sigmoid(std::source_location where = std::source_location::current()) const;
  /// The hyperbolic tangent, as torch's x.tanh(); integers give f32.
  [[nodiscard]] Tensor tanh(std::source_location where = std::source_location::current()) const;
  /// To a power typed as a Python number: an integer one keeps an integer tensor's dtype.
  [[nodiscard]] Tensor pow(double exponent,
                           std::source_location where = std::source_location::current()) const;
  /// As above, to an integer power: an integer tensor keeps its dtype.
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) [[nodiscard]] Tensor
      pow(I exponent, std::source_location where = std::source_location::current()) const {
    return pow_integer(static_cast<int64_t>(exponent), where);
  }
  /// Elementwise equality as a pred (bool) tensor, as torch's x.eq(other).
  [[nodiscard]] Tensor eq(const Tensor& other,
                          std::source_location where = std::source_location::current()) const;
  /// pow() to an integer power; what the integer overload of pow() calls.
  [[nodiscard]] Tensor pow_integer(int64_t exponent, std::source_location where) const;
  /// The same tensor: a lazy tensor's value is always laid out row-major, as after
  /// torch's x.contiguous().
  [[nodiscard]] const Tensor& contiguous() const noexcept { return *this; }
  /// The dims, as torch's x.sizes().
  [[nodiscard]] const Shape& sizes() const { return shape(); }
  /// The dtype, as libtorch's x.scalar_type().
  [[nodiscard]] DType scalar_type() const { return dtype(); }

  // --- value access (defined in actors/; each waits only for this tensor's value) ---

  /// The single element's value (executes the tensor's pending graph first if it has one).
  [[nodiscard]] double item(std::source_location where = std::source_location::current()) const;
  /// As item(), cast to T, as libtorch's x.item<T>().
  template <class T>
  [[nodiscard]] T item(std::source_location where = std::source_location::current()) const {
    return static_cast<T>(item(where));
  }
  /// As item(), without blocking: the future completes when the value is on the host.
  [[nodiscard]] Future<double> item_async(
      std::source_location where = std::source_location::current()) const;
  /// The whole value on the host, as torch_xla's x.cpu().
  [[nodiscard]] CpuTensor cpu(std::source_location where = std::source_location::current()) const;
  /// cpu(), under its name of earlier releases.
  [[deprecated("use cpu(), torch's name")]] [[nodiscard]] CpuTensor to_cpu(
      std::source_location where = std::source_location::current()) const {
    return cpu(where);
  }
  /// As cpu(), without blocking: the future completes when the value is on the host.
  [[nodiscard]] Future<CpuTensor> to_cpu_async(
      std::source_location where = std::source_location::current()) const;
  /// The elements converted to T.
  template <class T>
  [[nodiscard]] std::vector<T> to_vector(
      std::source_location where = std::source_location::current()) const {
    return cpu(where).values<T>();
  }
  /// "tensor([[1, 2], [3, 4]], device='xla:0', dtype=f32)" (reads the value).
  [[nodiscard]] std::string to_string() const;

  // --- autograd (defined in graph/autograd/; grad mode and its guards are in graph/autograd.h) ---

  /// Whether gradients flow to or through this tensor: a leaf marked with requires_grad_(), or
  /// the result of an op recorded while one of its operands required grad.
  [[nodiscard]] bool requires_grad() const;
  /// Marks a leaf as one whose gradient backward() accumulates into grad(). Only floating-point
  /// tensors can require grad, and only leaves can stop (use detach() on others). Returns *this.
  const Tensor& requires_grad_(bool requires_grad = true,
                               std::source_location where = std::source_location::current()) const;
  /// The gradient backward() accumulated into this leaf (pending IR until the next step);
  /// undefined until a backward reaches it, and always for non-leaves.
  [[nodiscard]] Tensor grad() const;
  /// Replaces the gradient; an undefined tensor resets it, as zero_grad(set_to_none=True).
  /// A defined one must have this tensor's shape, dtype and device.
  void set_grad(const Tensor& grad,
                std::source_location where = std::source_location::current()) const;
  /// Whether the tensor is a leaf of the autograd graph: not produced by a recorded op.
  [[nodiscard]] bool is_leaf() const;
  /// The same value as a new tensor outside the autograd graph (no gradient flows through it).
  /// It shares the value, not later in-place updates: those give each handle its own value.
  [[nodiscard]] Tensor detach() const;
  /// Traces the gradient of this tensor with respect to every leaf it depends on and adds it to
  /// their grad(). `gradient` is d(loss)/d(this); it may be left out when the tensor has one
  /// element (it is then 1). Nothing executes: the gradients are pending IR. The graph's saved
  /// tensors are freed afterwards, unless `retain_graph` keeps them for another backward.
  void backward(const Tensor& gradient = {}, bool retain_graph = false,
                std::source_location where = std::source_location::current()) const;

 private:
  IntrusivePtr<TensorImpl> impl_;
};

/// Creates a tensor on `device` from host elements (copied before the call returns).
Tensor tensor_from_bytes(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                         Device device = {},
                         std::source_location where = std::source_location::current());
/// Creates a tensor on `device` from `host`, taking over its bytes: a batch the loader assembled
/// goes to the device without another copy.
Tensor tensor_from_host(CpuTensor host, Device device = {},
                        std::source_location where = std::source_location::current());
/// tensor_from_bytes with the SPMD sharding `sharding` (a key of intern_sharding, checked to
/// fit): under use_spmd() each device receives only its tile (graph/spmd.h's
/// tensor_from_host_sharded is the user's form).
Tensor tensor_from_bytes_sharded(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                                 Device device, int64_t sharding,
                                 std::source_location where = std::source_location::current());

/// Creates a tensor on `device` holding `values` (row-major, copied) in T's dtype, as
/// torch::tensor(values).reshape(shape).
template <class T>
Tensor tensor(std::span<const T> values, const Shape& shape, Device device = {},
              std::source_location where = std::source_location::current()) {
  return tensor_from_bytes(std::as_bytes(values), dtype_of<T>(), shape, device, where);
}
/// As above, from a std::vector.
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, Device device = {},
              std::source_location where = std::source_location::current()) {
  return tensor(std::span<const T>(values), shape, device, where);
}

/// Thrown when an op's operands do not fit: names the op, the shapes and the caller's line.
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The tensors a thread gave pending IR to (what mark_step executes), oldest first. One per
/// thread, made on first use and kept until the thread exits; the thread's TraceContext
/// (graph/trace_context.h) holds it. Tensors may die on other threads, so the list is locked.
class PendingTensors final : public RefCounted {
 public:
  /// The calling thread's list, made on first use.
  [[nodiscard]] static PendingTensors& current() {
    if (PendingTensors* list = ThisThread<PendingTensors>::get()) [[likely]]
      return *list;
    return make_current();
  }

  /// The tensors on `device` (all devices when null), as handles, oldest first.
  [[nodiscard]] std::vector<Tensor> tensors(const Device* device = nullptr);
  /// How many tensors the list holds, on every device.
  [[nodiscard]] std::size_t count();

 private:
  friend class TensorImpl;
  PendingTensors() = default;
  static PendingTensors& make_current();
  void track(TensorImpl* impl);
  void untrack(TensorImpl* impl);

  std::mutex mutex_;
  TensorImpl* head_ = nullptr;  // oldest
  TensorImpl* tail_ = nullptr;  // newest
  std::size_t count_ = 0;
};

}  // namespace axle
