// graph: IR nodes. A node is immutable once built; its hash, computed at construction, covers the
// op, attributes, shape, dtype and the operands' hashes. Device-data leaves hash by shape and dtype
// only and parameters by dtype only, so a graph's hash does not change with the data it reads.
#pragma once

#include <cstdint>
#include <source_location>
#include <span>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/shape.h"
#include "axle/engine/small_vector.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/device_data.h"
#include "axle/graph/op.h"

namespace axle {

class Node;
using NodePtr = IntrusivePtr<Node>;
using Operands = SmallVector<NodePtr, 3>;
using IntAttrs = SmallVector<int64_t, 8>;
using RealAttrs = SmallVector<double, 2>;

/// Where user code created a node (for errors, and dumps under XLA_IR_DEBUG=1). Holds a
/// std::source_location, which is one pointer to static data: nodes are many and small. An
/// unknown location is line 0 (no source line is).
struct SourceLocation {
  SourceLocation() = default;
  SourceLocation(const std::source_location& loc) noexcept  // NOLINT: implicit on purpose
      : loc_(loc) {}
  [[nodiscard]] bool known() const noexcept { return loc_.line() != 0; }
  [[nodiscard]] const char* file() const noexcept { return known() ? loc_.file_name() : ""; }
  [[nodiscard]] const char* function() const noexcept {
    return known() ? loc_.function_name() : "";
  }
  [[nodiscard]] uint32_t line() const noexcept { return loc_.line(); }

 private:
  std::source_location loc_;
};

/// One IR value: an op applied to operands, with the shape and (storage) dtype of its result.
/// Graph walks and releases read only a node's first 64 bytes (see the members).
class Node final : public RefCounted {
 public:
  static constexpr std::size_t kMaxInts = 10;  // max_pool2d has 9; 10 keeps a node 256 bytes
  static constexpr std::size_t kMaxReals = 2;  // the most any op has (iota's start and step)

  Node(Op op, DType dtype, const Shape& shape, Operands operands, IntAttrs ints = {},
       RealAttrs reals = {}, SourceLocation where = {});
  ~Node() override;

  // Nodes come and go by the million; engine's per-thread block cache keeps them off the general
  // allocator (and off fresh pages the allocator would otherwise fault in and give back).
  static void* operator new(std::size_t bytes);
  static void operator delete(void* block, std::size_t bytes) noexcept;

  /// A leaf reading `data` (hashes by its shape and dtype). With `sharding` (a key of
  /// intern_sharding, graph/sharding.h), the leaf's one int is that key, so its hash covers it.
  static NodePtr device_data(IntrusivePtr<DeviceData> data, SourceLocation where = {},
                             int64_t sharding = -1);
  /// A 0-d leaf whose value is fed at execution (hashes by dtype only).
  static NodePtr parameter(DType dtype, double value, SourceLocation where = {});
  /// A 0-d constant baked into the program (hashes by value).
  static NodePtr constant(DType dtype, double value, SourceLocation where = {});

  [[nodiscard]] Op op() const noexcept { return op_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] uint64_t hash() const noexcept { return hash_; }
  [[nodiscard]] std::span<const NodePtr> operands() const noexcept {
    return {num_operands_ <= kInlineOperands ? inline_operands_ : heap_operands_, num_operands_};
  }
  [[nodiscard]] std::span<const int64_t> ints() const noexcept { return {ints_, num_ints_}; }
  [[nodiscard]] std::span<const double> reals() const noexcept { return {reals_, num_reals_}; }
  [[nodiscard]] const SourceLocation& where() const noexcept { return where_; }
  /// For kDeviceData leaves (null for every other node).
  [[nodiscard]] const IntrusivePtr<DeviceData>& data() const noexcept;
  /// For kParameter and kConstant leaves.
  [[nodiscard]] double value() const noexcept { return num_operands_ == 0 ? leaf_.value : 0.0; }
  [[nodiscard]] bool is_leaf() const noexcept {
    return op_ == Op::kDeviceData || op_ == Op::kParameter;
  }

  /// Scratch for graph walks by the trace context that created the node (see
  /// graph/step_graph.cpp): a walk stamps the nodes it visits instead of looking them up in a
  /// map. Only the creating context's thread reads or writes it; walks on other threads use a
  /// map for this node.
  struct VisitMark {
    uint32_t walk = 0;  // the creating context's walk number (TraceContext::next_walk); 0: none
    int32_t index = -1;
  };
  /// The id of the trace context that created the node (see this_thread_creator_id).
  [[nodiscard]] uint32_t creator_id() const noexcept { return creator_; }
  /// The id of the calling thread's trace context, as nodes it creates record it (never
  /// reused), or 0 when the thread has none.
  [[nodiscard]] static uint32_t this_thread_creator_id() noexcept;
  [[nodiscard]] VisitMark& visit_mark() const noexcept { return mark_; }
  /// Whether any op node so far took an operand that another thread created (process-wide and
  /// sticky). A step may donate input buffers only when its nodes die with it, which a thread
  /// can tell only of graphs no other thread built on.
  [[nodiscard]] static bool ir_shared_across_threads() noexcept;

 private:
  friend class CreationLog;
  static void note_ir_shared_across_threads() noexcept;

  static constexpr std::size_t kInlineOperands = 3;
  struct LeafPayload {
    IntrusivePtr<DeviceData> data;
    double value = 0;
  };

  // First 64 bytes: what graph walks, the creation log and releases read — op, counts,
  // creator, mark, hash and the first two operands (or a leaf's data and value).
  Op op_;
  DType dtype_;
  uint8_t num_ints_ = 0;
  uint8_t num_reals_ = 0;
  uint32_t num_operands_ = 0;
  uint32_t creator_ = 0;
  uint32_t log_id_ = 0;  // the CreationLog holding this node; 0: none
  mutable VisitMark mark_;
  uint64_t hash_ = 0;
  // Which member is live: operands (inline up to three, else on the heap) for op nodes, the
  // payload for nodes without operands.
  union {
    NodePtr inline_operands_[kInlineOperands];
    NodePtr* heap_operands_;
    LeafPayload leaf_;
  };
  // The rest is for lowering and dumps.
  SourceLocation where_;
  Shape shape_;
  int64_t ints_[kMaxInts];
  double reals_[kMaxReals];
};

/// The op nodes (nodes with operands) a trace context created since it last synced, in creation
/// order, each held by one reference of the log's own. Creation order is a topological order
/// whose addresses are known up front, so a step's graph is collected by scanning the log
/// instead of chasing operand pointers (a chain of dependent cache misses once the graph
/// outgrows the cache), and clearing it frees the graph newest first, one node at a time,
/// instead of in a pointer-chasing cascade. Nodes no one else holds are dropped whenever the
/// log has doubled since it was last compacted, so a thread that never syncs keeps no more
/// garbage than it has live nodes.
class CreationLog {
 public:
  [[nodiscard]] std::span<const Node* const> nodes() const noexcept {
    return {nodes_.data(), nodes_.size()};
  }
  /// Whether `node` is in this log. Log ids are 32 bits: after four billion syncs one may come
  /// back, so callers take a `true` as a hint (a false one costs a scan, never a wrong graph).
  [[nodiscard]] bool contains(const Node* node) const noexcept { return node->log_id_ == id_; }
  /// Drops the log's references, newest first, and starts a new log. Tensors hold their own
  /// references, so a node still pending stays alive (outside the log).
  void clear();

  CreationLog();
  ~CreationLog();
  CreationLog(const CreationLog&) = delete;
  CreationLog& operator=(const CreationLog&) = delete;

 private:
  friend class Node;
  // Makes room for one more node (so that appending cannot fail), compacting first if due.
  void reserve_one();
  void append(Node* node) noexcept;
  void compact();

  std::vector<const Node*> nodes_;
  uint32_t id_;
  std::size_t compact_at_;
};

/// Where the calling thread's new nodes are recorded: the thread's number, which each node keeps
/// as its creator, and its creation log. One per thread, made on first use and kept until the
/// thread exits; the thread's TraceContext (graph/trace_context.h) holds it, so the trace state
/// above the IR finds the same log.
class NodeRecord final : public RefCounted {
 public:
  /// The calling thread's record, made on first use.
  [[nodiscard]] static NodeRecord& current() {
    if (NodeRecord* record = ThisThread<NodeRecord>::get()) [[likely]]
      return *record;
    return make_current();
  }
  /// The calling thread's record, or null when it has made no node yet.
  [[nodiscard]] static NodeRecord* current_if_any() noexcept {
    return ThisThread<NodeRecord>::get();
  }

  /// A number no other thread's record has had (from 1; 0 means none).
  [[nodiscard]] uint32_t id() const noexcept { return id_; }
  /// The op nodes the thread created since its last sync, in creation order.
  [[nodiscard]] CreationLog& creation_log() noexcept { return log_; }

 private:
  NodeRecord();
  static NodeRecord& make_current();

  const uint32_t id_;
  CreationLog log_;
};

}  // namespace axle
