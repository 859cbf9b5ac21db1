// graph: IR node construction, hashing and (iterative) destruction.
#include "axle/graph/ir.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

#include "axle/engine/block_cache.h"
#include "axle/engine/hash.h"
#include "axle/engine/release_queue.h"
#include "axle/engine/thread_binding.h"

namespace axle {
namespace {

uint64_t hash_shape(uint64_t h, const Shape& shape) {
  h = hash_combine(h, static_cast<uint64_t>(shape.rank()));
  for (int64_t d : shape.dims()) h = hash_combine(h, static_cast<uint64_t>(d));
  return h;
}

}  // namespace

void* Node::operator new(std::size_t bytes) { return allocate_block(bytes); }

void Node::operator delete(void* block, std::size_t bytes) noexcept { free_block(block, bytes); }

static_assert(sizeof(Node) == 256, "walks and the block cache are tuned to a 256-byte node");
static_assert(sizeof(Node) <= kMaxCachedBlockBytes, "nodes come from the block cache");

namespace {

struct OpRow {
  std::string_view name;
  OpFamily family;
};

// clang-format off
constexpr std::array<OpRow, static_cast<std::size_t>(Op::kCount)> kOpTable = {{
    {"device_data", OpFamily::kLeaf},
    {"parameter", OpFamily::kLeaf},
    {"constant", OpFamily::kLeaf},
    {"reshape", OpFamily::kDataMovement},
#define AXLE_OP_ROW(name, str, family) {str, OpFamily::k##family},
    AXLE_IR_OPS(AXLE_OP_ROW, AXLE_OP_ROW)
#undef AXLE_OP_ROW
#define AXLE_FLOAT_FUNCTION_ROW(name, str) {str, OpFamily::kFloatFunction},
    AXLE_FLOAT_FUNCTIONS(AXLE_FLOAT_FUNCTION_ROW)
#undef AXLE_FLOAT_FUNCTION_ROW
}};
// clang-format on

// What graph hashes take for an op: its name's hash, not its number (which moves as ops are
// added). Apart from the rows, so that tracing reads eight to a cache line.
constexpr auto kOpHashes = [] {
  std::array<uint64_t, kOpTable.size()> hashes{};
  for (std::size_t i = 0; i < hashes.size(); ++i) hashes[i] = hash_string(kOpTable[i].name);
  return hashes;
}();

}  // namespace

std::string_view op_name(Op op) noexcept {
  auto i = static_cast<std::size_t>(op);
  return i < kOpTable.size() ? kOpTable[i].name : "unknown";
}

OpFamily op_family(Op op) noexcept {
  auto i = static_cast<std::size_t>(op);
  return i < kOpTable.size() ? kOpTable[i].family : OpFamily::kLeaf;
}

Node::Node(Op op, DType dtype, const Shape& shape, Operands operands, IntAttrs ints,
           RealAttrs reals, SourceLocation where)
    : RefCounted(operands.empty() ? 0 : 1),  // an op node starts with its creation log's reference
      op_(op),
      dtype_(dtype),
      where_(where),
      shape_(shape) {
  // Everything that can fail comes before the union's member is constructed.
  if (ints.size() > kMaxInts || reals.size() > kMaxReals) {
    throw std::logic_error(
        fmt::format("op {}: {} integer and {} real attributes (at most {} and {})", op_name(op),
                    ints.size(), reals.size(), kMaxInts, kMaxReals));
  }
  const std::size_t n = operands.size();
  if (n > UINT32_MAX) throw std::length_error(fmt::format("op {}: too many operands", op_name(op)));
  NodeRecord& record = NodeRecord::current();
  creator_ = record.id();
  CreationLog* log = nullptr;
  if (n > 0) {
    log = &record.creation_log();
    log->reserve_one();
  }
  NodePtr* heap = n > kInlineOperands ? new NodePtr[n] : nullptr;

  num_ints_ = static_cast<uint8_t>(ints.size());
  std::copy(ints.begin(), ints.end(), ints_);
  num_reals_ = static_cast<uint8_t>(reals.size());
  std::copy(reals.begin(), reals.end(), reals_);
  num_operands_ = static_cast<uint32_t>(n);
  if (n == 0) {
    new (&leaf_) LeafPayload();
  } else if (heap) {
    heap_operands_ = heap;
    for (std::size_t i = 0; i < n; ++i) heap[i] = std::move(operands[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) new (&inline_operands_[i]) NodePtr(std::move(operands[i]));
  }

  uint64_t h =
      hash_combine(kOpHashes[static_cast<std::size_t>(op)], static_cast<uint64_t>(dtype));
  h = hash_shape(h, shape);
  bool foreign_operand = false;
  for (const NodePtr& operand : this->operands()) {
    h = hash_combine(h, operand->hash());
    foreign_operand |= operand->creator_ != creator_;
  }
  if (foreign_operand) note_ir_shared_across_threads();
  h = hash_combine(h, num_ints_);
  for (int64_t v : this->ints()) h = hash_combine(h, static_cast<uint64_t>(v));
  h = hash_combine(h, num_reals_);
  for (double v : this->reals()) h = hash_combine(h, hash_double(v));
  hash_ = h;
  if (log) log->append(this);
}

Node::~Node() {
  if (num_operands_ == 0) {
    leaf_.~LeafPayload();
    return;
  }
  // Operands are deferred, not released here: releasing the tip of a long chain would otherwise
  // recurse once per node.
  ReleaseScope batch;  // defers to an enclosing scope if there is one
  const bool on_heap = num_operands_ > kInlineOperands;
  NodePtr* operands = on_heap ? heap_operands_ : inline_operands_;
  for (uint32_t i = 0; i < num_operands_; ++i) batch.defer(operands[i].detach());
  if (on_heap) {
    delete[] heap_operands_;
  } else {
    for (uint32_t i = 0; i < num_operands_; ++i) inline_operands_[i].~NodePtr();
  }
}

const IntrusivePtr<DeviceData>& Node::data() const noexcept {
  static const IntrusivePtr<DeviceData> kNone;
  return num_operands_ == 0 ? leaf_.data : kNone;
}

uint32_t Node::this_thread_creator_id() noexcept {
  const NodeRecord* record = NodeRecord::current_if_any();
  return record ? record->id() : 0;
}

namespace {
std::atomic<bool> g_ir_shared_across_threads{false};
}  // namespace

void Node::note_ir_shared_across_threads() noexcept {
  if (!g_ir_shared_across_threads.load(std::memory_order_relaxed)) {
    g_ir_shared_across_threads.store(true, std::memory_order_relaxed);
  }
}

bool Node::ir_shared_across_threads() noexcept {
  return g_ir_shared_across_threads.load(std::memory_order_relaxed);
}

namespace {

constexpr std::size_t kMinCompaction = 4096;
// Log ids are unique across threads (0 means "in no log"; see CreationLog::contains on wrap).
std::atomic<uint32_t> g_next_log_id{1};

uint32_t next_log_id() noexcept {
  uint32_t id = g_next_log_id.fetch_add(1, std::memory_order_relaxed);
  if (id == 0) id = g_next_log_id.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void prefetch_for_write(const void* p) noexcept { __builtin_prefetch(p, 1); }

}  // namespace

CreationLog::CreationLog() : id_(next_log_id()), compact_at_(kMinCompaction) {}

namespace {
// Record numbers start at 1: 0 is "no record" (a graph walk on a thread that made no node).
std::atomic<uint32_t> g_next_record_id{1};
}  // namespace

NodeRecord::NodeRecord() : id_(g_next_record_id.fetch_add(1, std::memory_order_relaxed)) {}

NodeRecord& NodeRecord::make_current() { return bind_until_thread_exit(new NodeRecord()); }

CreationLog::~CreationLog() { clear(); }

void CreationLog::reserve_one() {
  if (nodes_.size() >= compact_at_) compact();
  if (nodes_.size() == nodes_.capacity())
    nodes_.reserve(std::max<std::size_t>(64, 2 * nodes_.size()));
}

void CreationLog::append(Node* node) noexcept {
  nodes_.push_back(node);  // within the capacity reserve_one made
  node->log_id_ = id_;
}

void CreationLog::clear() {
  // A fresh id first: the nodes released below are no longer in this log.
  id_ = next_log_id();
  std::vector<const Node*> nodes = std::move(nodes_);
  nodes_.clear();
  constexpr std::size_t kAhead = 8;
  ReleaseScope batch;  // one queue for the whole log, not one per node
  for (std::size_t i = nodes.size(); i-- > 0;) {
    if (i >= kAhead) prefetch_for_write(nodes[i - kAhead]);
    nodes[i]->release();  // newest first: a node's logged operands still hold the log's reference
    batch.drain();
  }
  nodes.clear();
  if (nodes_.empty()) nodes_ = std::move(nodes);  // keep the capacity
  compact_at_ = kMinCompaction;
}

void CreationLog::compact() {
  // Newest first, so an operand freed by its user's release goes in the same pass. A count of
  // one is the log's own: no other thread can hold the node, so the count cannot rise.
  std::size_t kept = nodes_.size();
  ReleaseScope batch;
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    const Node* node = nodes_[i];
    if (node->use_count() == 1) {
      nodes_[i] = nullptr;
      --kept;
      node->release();
      batch.drain();
    }
  }
  std::erase(nodes_, nullptr);
  compact_at_ = std::max(kMinCompaction, 2 * kept);
}

NodePtr Node::device_data(IntrusivePtr<DeviceData> data, SourceLocation where, int64_t sharding) {
  IntAttrs ints;
  if (sharding >= 0) ints.push_back(sharding);
  auto node = make_intrusive<Node>(Op::kDeviceData, data->dtype(), data->shape(), Operands{},
                                   std::move(ints), RealAttrs{}, where);
  node->leaf_.data = std::move(data);
  return node;
}

NodePtr Node::parameter(DType dtype, double value, SourceLocation where) {
  auto node = make_intrusive<Node>(Op::kParameter, dtype, Shape{}, Operands{}, IntAttrs{},
                                   RealAttrs{}, where);
  node->leaf_.value = value;
  return node;
}

NodePtr Node::constant(DType dtype, double value, SourceLocation where) {
  // The value is an attribute, so it is part of the hash (unlike a parameter's).
  auto node = make_intrusive<Node>(Op::kConstant, dtype, Shape{}, Operands{}, IntAttrs{},
                                   RealAttrs{value}, where);
  node->leaf_.value = value;
  return node;
}

}  // namespace axle
