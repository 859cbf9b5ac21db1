// graph: IR nodes. A node is immutable once built; its hash, computed at construction, covers the
// op, attributes, shape, dtype and the operands' hashes. Device-data leaves hash by shape and dtype
// only and parameters by dtype only, so a graph's hash does not change with the data it reads.
#pragma once

#include <cstdint>
#include <source_location>

#include "engine/dtype.h"
#include "engine/intrusive_ptr.h"
#include "engine/shape.h"
#include "engine/small_vector.h"
#include "graph/device_data.h"
#include "graph/op.h"

namespace axle {

class Node;
using NodePtr = IntrusivePtr<Node>;
using Operands = SmallVector<NodePtr, 3>;
using IntAttrs = SmallVector<int64_t, 8>;
using RealAttrs = SmallVector<double, 2>;

/// Where user code created a node (for errors, and dumps under XLA_IR_DEBUG=1). Holds a
/// std::source_location, which is one pointer to static data: nodes are many and small.
struct SourceLocation {
  SourceLocation() = default;
  SourceLocation(const std::source_location& loc) noexcept  // NOLINT: implicit on purpose
      : loc_(loc), known_(true) {}
  [[nodiscard]] const char* file() const noexcept { return known_ ? loc_.file_name() : ""; }
  [[nodiscard]] const char* function() const noexcept { return known_ ? loc_.function_name() : ""; }
  [[nodiscard]] uint32_t line() const noexcept { return known_ ? loc_.line() : 0; }

 private:
  std::source_location loc_;
  bool known_ = false;
};

/// One IR value: an op applied to operands, with the shape and (storage) dtype of its result.
class Node final : public RefCounted {
 public:
  Node(Op op, DType dtype, const Shape& shape, Operands operands, IntAttrs ints = {},
       RealAttrs reals = {}, SourceLocation where = {});
  ~Node() override;

  // Nodes come and go by the million; a per-thread cache of node-sized blocks keeps them off the
  // general allocator (and off fresh pages the allocator would otherwise fault in and give back).
  static void* operator new(std::size_t bytes);
  static void operator delete(void* block, std::size_t bytes) noexcept;

  /// A leaf reading `data` (hashes by its shape and dtype).
  static NodePtr device_data(IntrusivePtr<DeviceData> data, SourceLocation where = {});
  /// A 0-d leaf whose value is fed at execution (hashes by dtype only).
  static NodePtr parameter(DType dtype, double value, SourceLocation where = {});
  /// A 0-d constant baked into the program (hashes by value).
  static NodePtr constant(DType dtype, double value, SourceLocation where = {});

  [[nodiscard]] Op op() const noexcept { return op_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] uint64_t hash() const noexcept { return hash_; }
  [[nodiscard]] const Operands& operands() const noexcept { return operands_; }
  [[nodiscard]] const IntAttrs& ints() const noexcept { return ints_; }
  [[nodiscard]] const RealAttrs& reals() const noexcept { return reals_; }
  [[nodiscard]] const SourceLocation& where() const noexcept { return where_; }
  /// For kDeviceData leaves.
  [[nodiscard]] const IntrusivePtr<DeviceData>& data() const noexcept { return data_; }
  /// For kParameter and kConstant leaves.
  [[nodiscard]] double value() const noexcept { return value_; }
  [[nodiscard]] bool is_leaf() const noexcept {
    return op_ == Op::kDeviceData || op_ == Op::kParameter;
  }

  /// Scratch for graph walks on the thread that created the node (see actors/step_graph.cpp):
  /// a walk stamps the nodes it visits instead of looking them up in a map. Only the creating
  /// thread reads or writes it; walks on other threads use a map for this node.
  struct VisitMark {
    uint32_t walk = 0;  // a per-thread walk number; 0 is never a walk
    int32_t index = -1;
  };
  [[nodiscard]] bool created_on_this_thread() const noexcept;
  [[nodiscard]] VisitMark& visit_mark() const noexcept { return mark_; }

 private:
  // Graph walks read only the first cache line of a node: op, mark, creator, hash and the first
  // two operands. The rest (shape, attributes, location) is for lowering and dumps.
  Op op_;
  DType dtype_;
  mutable VisitMark mark_;
  uint32_t creator_;
  uint64_t hash_ = 0;
  Operands operands_;
  Shape shape_;
  IntAttrs ints_;
  RealAttrs reals_;
  SourceLocation where_;
  IntrusivePtr<DeviceData> data_;
  double value_ = 0;
};

}  // namespace axle
