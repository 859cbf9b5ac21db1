// graph: IR node construction, hashing and (iterative) destruction.
#include "graph/ir.h"

#include <array>
#include <atomic>
#include <vector>

#include "engine/hash.h"

namespace axle {
namespace {

uint64_t hash_shape(uint64_t h, const Shape& shape) {
  h = hash_combine(h, static_cast<uint64_t>(shape.rank()));
  for (int64_t d : shape.dims()) h = hash_combine(h, static_cast<uint64_t>(d));
  return h;
}

// Releasing the last reference to the tip of a long chain would otherwise recurse once per node
// (a million-node chain overflows the stack): operands dropped during a destruction are queued
// and released by the outermost destructor in a loop.
thread_local bool tls_destroying = false;
// Identifies the thread that created a node (numbers are never reused). Constant-initialised and
// set on first use, so reading it needs no thread_local init guard.
std::atomic<uint32_t> g_next_thread_id{1};
thread_local uint32_t tls_thread_id = 0;

uint32_t this_thread_id() noexcept {
  if (tls_thread_id == 0) tls_thread_id = g_next_thread_id.fetch_add(1, std::memory_order_relaxed);
  return tls_thread_id;
}
thread_local std::vector<Node*>* tls_release_queue = nullptr;

// Freed node blocks kept for reuse by this thread (bounded: a burst of frees beyond the cap
// goes back to the allocator). Nodes can outlive the cache — a tensor in static storage dies
// after the main thread's thread_locals — so its state is tracked in a trivially destructible
// flag that stays readable after the cache is gone.
enum class CacheState : uint8_t { kUnborn, kAlive, kDead };
thread_local CacheState tls_cache_state = CacheState::kUnborn;

struct NodeBlockCache {
  static constexpr std::size_t kMaxBlocks = 1 << 16;
  std::vector<void*> blocks;
  NodeBlockCache() { tls_cache_state = CacheState::kAlive; }
  ~NodeBlockCache() {
    tls_cache_state = CacheState::kDead;
    for (void* b : blocks) ::operator delete(b);
  }
};
thread_local NodeBlockCache tls_node_blocks;

}  // namespace

void* Node::operator new(std::size_t bytes) {
  if (bytes == sizeof(Node) && tls_cache_state != CacheState::kDead) {
    auto& cache = tls_node_blocks.blocks;  // constructs the cache on first use
    if (!cache.empty()) {
      void* block = cache.back();
      cache.pop_back();
      return block;
    }
  }
  return ::operator new(bytes);
}

void Node::operator delete(void* block, std::size_t bytes) noexcept {
  if (bytes == sizeof(Node) && tls_cache_state == CacheState::kAlive) {
    auto& cache = tls_node_blocks.blocks;
    if (cache.size() < NodeBlockCache::kMaxBlocks) {
      try {
        cache.push_back(block);
        return;
      } catch (...) {
        // no room to remember it: give it back below
      }
    }
  }
  ::operator delete(block);
}

std::string_view op_name(Op op) noexcept {
  static constexpr std::array<std::string_view, static_cast<std::size_t>(Op::kCount)> kNames = {
      "device_data", "parameter", "constant", "reshape",
#define AXLE_OP_NAME(name, str) str,
      AXLE_KERNEL_OPS(AXLE_OP_NAME)
#undef AXLE_OP_NAME
  };
  auto i = static_cast<std::size_t>(op);
  return i < kNames.size() ? kNames[i] : "unknown";
}

Node::Node(Op op, DType dtype, const Shape& shape, Operands operands, IntAttrs ints,
           RealAttrs reals, SourceLocation where)
    : op_(op),
      dtype_(dtype),
      creator_(this_thread_id()),
      operands_(std::move(operands)),
      shape_(shape),
      ints_(std::move(ints)),
      reals_(std::move(reals)),
      where_(where) {
  uint64_t h = hash_combine(static_cast<uint64_t>(op), static_cast<uint64_t>(dtype));
  h = hash_shape(h, shape);
  for (const NodePtr& operand : operands_) h = hash_combine(h, operand->hash());
  h = hash_combine(h, ints_.size());
  for (int64_t v : ints_) h = hash_combine(h, static_cast<uint64_t>(v));
  h = hash_combine(h, reals_.size());
  for (double v : reals_) h = hash_combine(h, hash_double(v));
  hash_ = h;
}

Node::~Node() {
  if (operands_.empty()) return;
  std::vector<Node*> local;
  if (!tls_destroying) tls_release_queue = &local;
  for (NodePtr& operand : operands_) tls_release_queue->push_back(operand.detach());
  operands_.clear();
  if (tls_destroying) return;
  tls_destroying = true;
  while (!local.empty()) {
    Node* next = local.back();
    local.pop_back();
    next->release();  // may run ~Node, which queues that node's operands onto `local`
  }
  tls_destroying = false;
  tls_release_queue = nullptr;
}

bool Node::created_on_this_thread() const noexcept { return creator_ == tls_thread_id; }

NodePtr Node::device_data(IntrusivePtr<DeviceData> data, SourceLocation where) {
  auto node = make_intrusive<Node>(Op::kDeviceData, data->dtype(), data->shape(), Operands{},
                                   IntAttrs{}, RealAttrs{}, where);
  node->data_ = std::move(data);
  return node;
}

NodePtr Node::parameter(DType dtype, double value, SourceLocation where) {
  auto node = make_intrusive<Node>(Op::kParameter, dtype, Shape{}, Operands{}, IntAttrs{},
                                   RealAttrs{}, where);
  node->value_ = value;
  return node;
}

NodePtr Node::constant(DType dtype, double value, SourceLocation where) {
  // The value is an attribute, so it is part of the hash (unlike a parameter's).
  auto node = make_intrusive<Node>(Op::kConstant, dtype, Shape{}, Operands{}, IntAttrs{},
                                   RealAttrs{value}, where);
  node->value_ = value;
  return node;
}

}  // namespace axle
