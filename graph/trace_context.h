// graph: the trace state of one replica — the tensors whose values are still pending IR (what
// mark_step executes), the op nodes created since the last sync (the creation log), the
// per-device random streams, grad mode, and which device `Device{}` means. One object per
// replica thread; the replica's host (actors/) holds it alongside its own state, and the thread
// is bound to it through engine's ThisThread, so the hot paths of tracing find it with one
// thread-local load.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/ir.h"
#include "axle/graph/tensor.h"

namespace axle {

/// Counter-based random state of one device: a seed and how many numbers were drawn.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// Trace state of one replica (one thread).
class TraceContext final : public RefCounted {
 public:
  /// The calling thread's context, made (and kept until the thread exits) on first use.
  [[nodiscard]] static TraceContext& current() {
    if (TraceContext* context = ThisThread<TraceContext>::get()) [[likely]] {
      return *context;
    }
    return make_current();
  }
  /// The calling thread's context, or null when it has traced nothing yet.
  [[nodiscard]] static TraceContext* current_if_any() noexcept {
    return ThisThread<TraceContext>::get();
  }

  TraceContext();
  ~TraceContext() override;

  /// A number no other context has had; nodes record their creator's (the thread's NodeRecord).
  [[nodiscard]] uint32_t id() const noexcept { return record_->id(); }

  /// Tensors with pending IR on `device` (all devices when null), as handles, oldest first.
  [[nodiscard]] std::vector<Tensor> pending_tensors(const Device* device = nullptr) {
    return pending_->tensors(device);
  }
  [[nodiscard]] std::size_t pending_count() { return pending_->count(); }

  /// The op nodes created since the last sync, in creation order.
  [[nodiscard]] CreationLog& creation_log() noexcept { return record_->creation_log(); }
  /// A new number for a graph walk over this context's nodes (see Node::VisitMark); never 0.
  [[nodiscard]] uint32_t next_walk() noexcept {
    if (++walks_ == 0) ++walks_;
    return walks_;
  }

  /// Nodes traced since the last step (for the runaway-graph limit).
  [[nodiscard]] uint64_t nodes_since_step() const noexcept { return nodes_since_step_; }
  void count_node() noexcept { ++nodes_since_step_; }
  void reset_node_count() noexcept { nodes_since_step_ = 0; }

  /// Takes `count` numbers from `device`'s stream; returns the (seed, offset) to draw them with.
  RngState draw_random(Device device, uint64_t count);
  void set_rng_state(Device device, uint64_t seed);
  [[nodiscard]] RngState rng_state(Device device);
  /// Every device's random state, to draw the same numbers again (activation checkpointing
  /// replays a forward pass): rng_states() now, set_rng_states() later.
  [[nodiscard]] std::unordered_map<int, RngState> rng_states() const { return rng_; }
  void set_rng_states(std::unordered_map<int, RngState> states) { rng_ = std::move(states); }

  /// Whether ops record what backward() needs (GradMode).
  [[nodiscard]] bool grad_enabled() const noexcept { return grad_enabled_; }
  void set_grad_enabled(bool enabled) noexcept { grad_enabled_ = enabled; }

  /// This replica's autocast state (graph/autocast.h): whether a region is on, and the
  /// lower-precision dtype its matmul-family ops compute in.
  [[nodiscard]] bool autocast_enabled() const noexcept { return autocast_enabled_; }
  [[nodiscard]] DType autocast_dtype() const noexcept { return autocast_dtype_; }
  void set_autocast_enabled(bool enabled) noexcept { autocast_enabled_ = enabled; }
  void set_autocast_dtype(DType dtype) noexcept { autocast_dtype_ = dtype; }

  /// The replica this context traces for: its default device (what `Device{}` means) and how
  /// many replicas its collectives span.
  [[nodiscard]] int default_device_ordinal() const noexcept { return default_ordinal_; }
  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  void set_default_device_ordinal(int ordinal) noexcept { default_ordinal_ = ordinal; }
  void set_world_size(int world_size) noexcept { world_size_ = world_size; }

 private:
  static TraceContext& make_current();

  // The thread's lower parts of its trace state: the nodes it made, the tensors it left pending.
  const IntrusivePtr<NodeRecord> record_;
  const IntrusivePtr<PendingTensors> pending_;
  uint32_t walks_ = 0;
  uint64_t nodes_since_step_ = 0;
  std::unordered_map<int, RngState> rng_;
  bool grad_enabled_ = true;
  bool autocast_enabled_ = false;
  DType autocast_dtype_ = DType::kBFloat16;
  int default_ordinal_ = 0;
  int world_size_ = 1;
};

}  // namespace axle
