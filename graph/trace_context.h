// graph: the per-thread trace state of a replica — the tensors whose values are still pending
// IR (what mark_step executes), the per-device random-number state, and the hook through which
// the runtime (actors/) observes every traced op (eager mode, runaway-graph cuts).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/intrusive_ptr.h"
#include "graph/tensor.h"

namespace axle {

/// Seen by the runtime after every traced op.
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  virtual void after_op(const Tensor& result, const SourceLocation& where) = 0;
};

/// Counter-based random state of one device: a seed and how many numbers were drawn.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// Trace state of one thread (one replica).
class TraceContext final : public RefCounted {
 public:
  /// The calling thread's context.
  static TraceContext& current();

  /// Tensors with pending IR on `device` (all devices when null), as handles.
  [[nodiscard]] std::vector<Tensor> pending_tensors(const Device* device = nullptr);
  [[nodiscard]] std::size_t pending_count();

  /// Nodes traced since the last step (for the runaway-graph limit).
  [[nodiscard]] uint64_t nodes_since_step() const noexcept { return nodes_since_step_; }
  void count_node() noexcept { ++nodes_since_step_; }
  void reset_node_count() noexcept { nodes_since_step_ = 0; }

  /// Takes `count` numbers from `device`'s stream; returns the (seed, offset) to draw them with.
  RngState draw_random(Device device, uint64_t count);
  void set_rng_state(Device device, uint64_t seed);
  [[nodiscard]] RngState rng_state(Device device);

  /// Installs the runtime's observer of traced ops (process-wide); null removes it.
  static void set_observer(TraceObserver* observer) noexcept;
  [[nodiscard]] static TraceObserver* observer() noexcept;

 private:
  friend class TensorImpl;
  void track(TensorImpl* impl);
  void untrack(TensorImpl* impl);

  std::mutex mutex_;            // tensors may die on other threads
  TensorImpl* head_ = nullptr;  // oldest
  TensorImpl* tail_ = nullptr;  // newest
  std::size_t pending_ = 0;
  uint64_t nodes_since_step_ = 0;
  std::unordered_map<int, RngState> rng_;
};

}  // namespace axle
