// graph/passes: sharding propagation — one ShardingSpec per instruction of an SPMD program, from
// the shardings of its inputs and its custom_sharding annotations (as XLA's
// ShardingPropagation, with a simpler cost model). Longer than most files: the rules of every op
// family belong together, beside the one sweep that applies them.
//
// The rules
// ---------
// Every rule is a dim map: for operand j of an instruction, which output dimension each operand
// dimension is (or none). Propagating a sharding through a map keeps the tiles of mapped
// dimensions and moves the tiles of unmapped ones into the replicate dimension (the devices that
// held different tiles of such a dimension now hold the same tile: the partitioner gathers, or,
// for a contracting or reduced dimension, all-reduces partial results). Forward, an operand's
// sharding gives a candidate for the output; backward, the output's sharding gives a candidate
// for the operand. A mapped dimension whose size the tiles do not divide is left unmapped.
//   - elementwise ops, where, cast, expand, bernoulli and the random ops' scalars: operand dims
//     align with the output's trailing dims (NumPy); a broadcast dimension (size 1 against a
//     larger one) is unmapped, so a bias added to a batch-sharded activation stays replicated.
//   - reductions (sum, mean, max, min, logsumexp, argmax): kept dimensions map, reduced ones
//     drop (their tiles become replication: the result needs an all_reduce).
//   - softmax, log_softmax, topk, slice, cat: every dimension maps except the one they work
//     along; layer_norm is made of these and elementwise ops. cumsum: every dimension maps (a
//     scan split along its dim adds each shard's prefix, see the partitioner).
//   - matmul: batch dims map (NumPy-aligned), a's free dim to the output's rows, b's free dim to
//     its columns; the contracting dim is unmapped, so a contracting-sharded matmul gives an
//     output sharded like its free dims (replicated over the contracting tiles). Its backward
//     ops are matmuls too: the same rule gives a weight gradient of a batch-sharded activation
//     as replicated (contracted over the batch).
//   - reshape: dimensions are grouped where the running products of the two shapes meet; a
//     group of one dimension each side maps; a split or a merge maps its leading dimension (the
//     tiles must divide it), the others are unmapped.
//   - permute: output dim i is operand dim perm[i].
//   - index_select: the table's other dims map, the index's dim maps to the selected dim (so an
//     embedding is sharded like its indices' batch, or like the table's embedding dim); gather,
//     scatter_add: dims of equal size map, except the indexed one; one_hot: the index's dims.
//   - conv2d: the batch (x dim 0) and the output channels (w dim 0); pooling and its backward:
//     batch and channels.
//   - scaled_dot_product_attention and its backward: batch dims (heads included), and the
//     forward's query rows.
//   - optimization_barrier: its output is the operand it passes.
//   - custom_sharding and leaves are fixed: annotations have the annotated sharding, leaves
//     their input sharding (replicated when none is given).
//   - every other op (collectives, ops added later without a rule): output replicated and
//     fixed; its operands are asked to be replicated.
// Instructions no sharding reaches (constants and fills with no sharded user) are replicated.
//
// Where candidates meet
// ---------------------
// An instruction's candidates come from its operands (forward) and from its users (backward).
// First choice is the merge of all of them, when one exists (each candidate tiles dimensions the
// others leave alone, or tiles them alike, and the devices agree): it asks nobody to move data,
// only to slice. Otherwise each candidate is costed in bytes moved: for an operand, resharding
// it from its sharding to the one the choice needs of it; for a user, resharding this value from
// the choice to the sharding that user wants. The least bytes win; ties go to the earlier
// candidate: operands in operand order, then users in program order.
//
// Sweeps: forward in program order, then backward; repeated until nothing changes, at most
// kMaxSweeps times. Each sweep is linear in instructions and operands (times devices and rank).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

constexpr int kMaxSweeps = 8;
using DimMap = std::vector<int>;  // operand dim -> output dim, or -1

int64_t product(std::span<const int64_t> values) {
  return std::accumulate(values.begin(), values.end(), int64_t{1}, std::multiplies<>());
}

// A sharding with every replicate group's devices in ascending order (one text per layout).
ShardingSpec canonical(ShardingSpec s) {
  if (s.is_replicated()) return ShardingSpec::replicated();
  if (!s.last_tile_dim_replicate) return s;
  const int64_t group = s.tile_dims.back();
  if (group == 1) {
    s.tile_dims.pop_back();
    s.last_tile_dim_replicate = false;
    return s;
  }
  for (std::size_t at = 0; at < s.devices.size(); at += static_cast<std::size_t>(group)) {
    std::sort(s.devices.begin() + static_cast<std::ptrdiff_t>(at),
              s.devices.begin() + static_cast<std::ptrdiff_t>(at + group));
  }
  return s;
}

// `s` (of a tensor of rank `from_rank`) carried to a tensor of shape `to`: target dim d takes
// source dim source_of[d]'s tiles (-1: none); the tiles of source dims no target dim takes join
// the replicate dimension.
ShardingSpec remap(const ShardingSpec& s, int from_rank, const Shape& to,
                   std::span<const int> source_of) {
  if (s.is_replicated() || s.tiled_rank() != from_rank) return ShardingSpec::replicated();
  std::vector<int64_t> tile_dims;
  std::vector<uint8_t> taken(static_cast<std::size_t>(from_rank), 0);
  std::vector<int> source(source_of.begin(), source_of.end());
  bool sharded = false;
  for (int d = 0; d < to.rank(); ++d) {
    const int e = source[d];
    if (e >= 0 && (taken[e] || to[d] % s.tiles(e) != 0)) source[d] = -1;
    if (source[d] >= 0) taken[source[d]] = 1;
    tile_dims.push_back(source[d] >= 0 ? s.tiles(source[d]) : 1);
    sharded = sharded || tile_dims.back() > 1;
  }
  if (!sharded) return ShardingSpec::replicated();
  // The source's tile-array axes: its dims, then its replicate dimension.
  const int axes = static_cast<int>(s.tile_dims.size());
  std::vector<int> rest;  // source axes that become replication
  int64_t replication = 1;
  for (int a = 0; a < axes; ++a) {
    if (a < from_rank && taken[a]) continue;
    rest.push_back(a);
    replication *= s.tile_dims[a];
  }
  std::vector<int64_t> strides(static_cast<std::size_t>(axes), 1);
  for (int a = axes - 1; a > 0; --a) strides[a - 1] = strides[a] * s.tile_dims[a];
  ShardingSpec out;
  out.tile_dims.assign(tile_dims.begin(), tile_dims.end());
  out.devices.reserve(s.devices.size());
  // Walk the target's tile array (its dims, then replication) in row-major order.
  std::vector<int64_t> coords(static_cast<std::size_t>(axes), 0);
  const int64_t tiles = product(out.tile_dims);
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t rem = t;
    std::fill(coords.begin(), coords.end(), 0);
    for (int d = to.rank() - 1; d >= 0; --d) {
      if (source[d] >= 0) coords[source[d]] = rem % out.tile_dims[d];
      rem /= out.tile_dims[d];
    }
    for (int64_t r = 0; r < replication; ++r) {
      int64_t left = r;
      for (auto a = static_cast<int>(rest.size()) - 1; a >= 0; --a) {
        coords[rest[a]] = left % s.tile_dims[rest[a]];
        left /= s.tile_dims[rest[a]];
      }
      int64_t linear = 0;
      for (int a = 0; a < axes; ++a) linear += coords[a] * strides[a];
      out.devices.push_back(s.devices[linear]);
    }
  }
  if (replication > 1) {
    out.tile_dims.push_back(replication);
    out.last_tile_dim_replicate = true;
  }
  return canonical(std::move(out));
}

// The one sharding that refines both, when there is one: each tiles dimensions the other leaves
// alone, or tiles them alike, over the same devices.
std::optional<ShardingSpec> merge(const ShardingSpec& a, const ShardingSpec& b, int rank) {
  if (a.is_replicated()) return b;
  if (b.is_replicated() || a == b) return a;
  if (a.tiled_rank() != rank || b.tiled_rank() != rank || a.devices.size() != b.devices.size()) {
    return std::nullopt;
  }
  std::vector<int64_t> tiles;
  tiles.reserve(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    if (a.tiles(d) > 1 && b.tiles(d) > 1 && a.tiles(d) != b.tiles(d)) return std::nullopt;
    tiles.push_back(std::max(a.tiles(d), b.tiles(d)));
  }
  const int64_t count = product(tiles);
  std::vector<std::vector<int64_t>> members(static_cast<std::size_t>(count));
  for (int64_t device : a.devices) {
    if (std::find(b.devices.begin(), b.devices.end(), device) == b.devices.end()) {
      return std::nullopt;
    }
    const std::vector<int64_t> ta = a.tile_of(device);
    const std::vector<int64_t> tb = b.tile_of(device);
    int64_t linear = 0;
    for (int d = 0; d < rank; ++d) {
      if (a.tiles(d) > 1 && b.tiles(d) > 1 && ta[d] != tb[d]) return std::nullopt;
      linear = linear * tiles[d] + (a.tiles(d) > 1 ? ta[d] : tb[d]);
    }
    members[linear].push_back(device);
  }
  const std::size_t group = members[0].size();
  ShardingSpec out;
  out.tile_dims.assign(tiles.begin(), tiles.end());
  for (std::vector<int64_t>& m : members) {
    if (m.size() != group || group == 0) return std::nullopt;
    std::sort(m.begin(), m.end());
    out.devices.insert(out.devices.end(), m.begin(), m.end());
  }
  if (group > 1) {
    out.tile_dims.push_back(static_cast<int64_t>(group));
    out.last_tile_dim_replicate = true;
  }
  return canonical(std::move(out));
}

// Bytes the devices of `to` receive to hold their tiles when the value is laid out as `from`.
double reshard_bytes(const Shape& shape, DType dtype, const ShardingSpec& from,
                     const ShardingSpec& to) {
  if (to.is_replicated() && from.is_replicated()) return 0;
  const std::vector<int64_t>& devices = to.is_replicated() ? from.devices : to.devices;
  const int rank = shape.rank();
  double bytes = 0;
  for (int64_t device : devices) {
    const std::vector<int64_t> want = to.tile_of(device);
    const std::vector<int64_t> have = from.tile_of(device);
    double wanted = 1;
    double overlap = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t wt = to.tiles(d);
      const int64_t ht = from.tiles(d);
      const int64_t w0 = want.empty() ? 0 : want[d] * shape[d] / wt;
      const int64_t w1 = want.empty() ? shape[d] : (want[d] + 1) * shape[d] / wt;
      const int64_t h0 = have.empty() ? 0 : have[d] * shape[d] / ht;
      const int64_t h1 = have.empty() ? shape[d] : (have[d] + 1) * shape[d] / ht;
      wanted *= static_cast<double>(w1 - w0);
      overlap *= static_cast<double>(std::max<int64_t>(0, std::min(w1, h1) - std::max(w0, h0)));
    }
    bytes += wanted - overlap;
  }
  return bytes * static_cast<double>(dtype_size(dtype));
}

// Ops whose operands' dims align with the output's trailing dims: the elementwise ones, expand,
// and the random ops (their scalars and bernoulli's probabilities).
bool maps_trailing_dims(Op op) {
  switch (op) {
    case Op::kExpand:
    case Op::kRandUniform:
    case Op::kRandNormal:
    case Op::kRandInt:
    case Op::kBernoulli:
      return true;
    default:
      return is_elementwise(op);
  }
}

// NumPy alignment of an operand's dims with the output's trailing dims; broadcast dims unmapped.
void align_trailing(const Shape& operand, const Shape& out, int first, int last, DimMap& map) {
  const int shift = out.rank() - operand.rank();
  for (int e = first; e < last; ++e) {
    const int d = e + shift;
    map[e] = d >= 0 && operand[e] == out[d] ? d : -1;
  }
}

// Reshape: groups of dims whose products meet; a group maps its leading (non-1) dims.
void reshape_map(const Shape& in, const Shape& out, DimMap& map) {
  int e = 0;
  int d = 0;
  while (e < in.rank() && d < out.rank()) {
    if (in[e] == 1) {
      ++e;
      continue;
    }  // NOLINT(readability-braces-around-statements)
    if (out[d] == 1) {
      ++d;
      continue;
    }            // NOLINT
    map[e] = d;  // the group's leading dims
    int64_t pin = in[e++];
    int64_t pout = out[d++];
    while (pin != pout) {
      if (pin < pout) {
        if (e >= in.rank()) return;
        pin *= in[e++];
      } else {
        if (d >= out.rank()) return;
        pout *= out[d++];
      }
    }
  }
}

// The dim map of operand j of instruction i; false for an op without a rule.
// A reduction's operand: its kept dims to the result's (ints: keepdim, then the reduced dims).
void reduction_map(const Shape& in, std::span<const int64_t> ints, DimMap& map) {
  const bool keepdim = !ints.empty() && ints[0] != 0;
  int d = 0;
  for (int e = 0; e < in.rank(); ++e) {
    const bool reduced = std::find(ints.begin() + 1, ints.end(), e) != ints.end();
    map[e] = reduced ? -1 : d;
    d += !reduced || keepdim;
  }
}

// Operand j of a matmul (ints: whether each operand is transposed): its batch dims to the
// result's, and its free dim (a's M, b's N) to the result's.
void matmul_map(const Shape& in, const Shape& out, std::span<const int64_t> ints, std::size_t j,
                DimMap& map) {
  const int r = in.rank();
  align_trailing(in, out, 0, r - 2, map);
  const bool transposed = ints.size() > j && ints[j] != 0;
  const int free = (j == 0) != transposed ? r - 2 : r - 1;
  map[free] = j == 0 ? out.rank() - 2 : out.rank() - 1;
}

// The convolutions and pooling on NCHW images: the batch maps, and the channels where they
// pass through whole; the image dims are windowed.
void image_map(Op op, const Shape& in, const Shape& out, std::span<const int64_t> ints,
               std::size_t j, DimMap& map) {
  if (op == Op::kConv2d) {
    map[0] = j == 0 ? 0 : 1;                // x's batch, w's output channels
  } else if (op == Op::kConvTranspose2d) {  // x's batch; w's output channels when ungrouped
    if (j == 0) map[0] = 0;
    if (j == 1 && ints.size() > 6 && ints[6] == 1) map[1] = 1;
  } else if (in.rank() == 4) {
    map = {in[0] == out[0] ? 0 : -1, in[1] == out[1] ? 1 : -1, -1, -1};
  }
}

bool operand_map(const Program& p, std::size_t i, std::size_t j, DimMap& map) {
  const Program::Instr& instr = p[i];
  const Shape& out = instr.shape;
  const Shape& in = p[p.operands(i)[j]].shape;
  const std::span<const int64_t> ints = p.ints(i);
  map.assign(static_cast<std::size_t>(in.rank()), -1);
  auto identity_except = [&](int64_t skip) {
    for (int e = 0; e < in.rank(); ++e) {
      map[e] = e != skip && e < out.rank() && in[e] == out[e] ? e : -1;
    }
  };
  const bool rows = instr.op == Op::kLayerNorm || instr.op == Op::kLayerNormBackward;
  if (maps_trailing_dims(instr.op) || rows) {  // layer_norm keeps each row (last k dims) whole
    align_trailing(in, out, 0, in.rank() - (rows ? static_cast<int>(ints[0]) : 0), map);
    return true;
  }
  switch (instr.op) {
    case Op::kReshape:
      reshape_map(in, out, map);
      return true;
    case Op::kSum:
    case Op::kMean:
    case Op::kReduceMax:
    case Op::kReduceMin:  // NOLINT
    case Op::kLogSumExp:
    case Op::kArgMax:
      reduction_map(in, ints, map);
      return true;
    case Op::kCumsum:  // a scan keeps its operand's split (the partitioner adds the prefixes)
      identity_except(-1);
      return true;
    case Op::kSoftmax:
    case Op::kLogSoftmax:
    case Op::kTopK:  // NOLINT
    case Op::kSlice:
    case Op::kConcat:
      identity_except(ints.empty() ? -1 : ints[0]);
      return true;
    case Op::kMatmul:
      matmul_map(in, out, ints, j, map);
      return true;
    case Op::kPermute:
      for (int d = 0; d < out.rank() && d < static_cast<int>(ints.size()); ++d) map[ints[d]] = d;
      return true;
    case Op::kIndexSelect:
      if (j == 0) identity_except(ints[0]);
      if (j == 1 && in.rank() == 1) map[0] = static_cast<int>(ints[0]);
      return true;
    case Op::kGather:  // out has the index's shape; x maps where sizes agree, except dim
      identity_except(j == 0 ? ints[0] : -1);
      return true;
    case Op::kScatterAdd:  // out has the base's shape; index and src map except dim
      identity_except(j == 0 ? -1 : ints[0]);
      return true;
    case Op::kOneHot:
      for (int e = 0; e < in.rank(); ++e) map[e] = e;
      return true;
    case Op::kConv2d:
    case Op::kConvTranspose2d:
    case Op::kMaxPool2d:
    case Op::kAvgPool2d:
    case Op::kMaxPool2dBackward:  // NOLINT
    case Op::kAvgPool2dBackward:
      image_map(instr.op, in, out, ints, j, map);
      return true;
    case Op::kScaledDotProductAttention:
    case Op::kScaledDotProductAttentionBackward:
      align_trailing(in, out, 0, in.rank() - 2, map);
      if (instr.op == Op::kScaledDotProductAttention && j == 0) map[in.rank() - 2] = out.rank() - 2;
      return true;
    case Op::kCustomSharding:
      identity_except(-1);
      return true;
    case Op::kOptimizationBarrier:
      if (!ints.empty() && static_cast<int64_t>(j) == ints[0]) identity_except(-1);
      return true;
    default:
      return false;
  }
}

std::vector<int> invert(const DimMap& map, int rank) {
  std::vector<int> inverse(static_cast<std::size_t>(rank), -1);
  for (std::size_t e = 0; e < map.size(); ++e) {
    if (map[e] >= 0) inverse[map[e]] = static_cast<int>(e);
  }
  return inverse;
}

enum State : uint8_t { kUnknown, kKnown, kFixed };

class Propagation {
 public:
  explicit Propagation(const Program& program) : p_(program) {}

  std::vector<ShardingSpec> run(std::span<const ShardingSpec> inputs, int* sweeps_done);

 private:
  // The sharding operand j of i gets from i's sharding `s` (backward).
  ShardingSpec operand_sharding(std::size_t i, std::size_t j, const ShardingSpec& s) const {
    DimMap map;
    const Shape& in = p_[p_.operands(i)[j]].shape;
    if (!operand_map(p_, i, j, map)) return ShardingSpec::replicated();
    return remap(s, p_[i].shape.rank(), in, map);
  }
  // The sharding i gets from operand j's sharding (forward).
  ShardingSpec output_sharding(std::size_t i, std::size_t j) const {
    DimMap map;
    const int32_t o = p_.operands(i)[j];
    if (!operand_map(p_, i, j, map)) return ShardingSpec::replicated();
    return remap(spec_[o], p_[o].shape.rank(), p_[i].shape, invert(map, p_[i].shape.rank()));
  }
  bool decide(std::size_t i);

  const Program& p_;
  std::vector<ShardingSpec> spec_;
  std::vector<uint8_t> state_;
  std::vector<uint32_t> user_begin_;  // users of i: users_[user_begin_[i] .. user_begin_[i+1])
  std::vector<int32_t> users_;
};

struct Candidate {
  ShardingSpec spec;
  int64_t operand = -1;  // forward: the operand index it comes from; backward: -1
  double weight = 1;     // backward: how many uses want it
};

bool Propagation::decide(std::size_t i) {
  const Program::Instr& instr = p_[i];
  if (instr.shape.rank() == 0) return false;
  std::vector<Candidate> candidates;
  const std::span<const int32_t> operands = p_.operands(i);
  for (std::size_t j = 0; j < operands.size(); ++j) {
    if (state_[operands[j]] == kUnknown) continue;
    candidates.push_back({output_sharding(i, j), static_cast<int64_t>(j)});
  }
  const std::size_t forward = candidates.size();
  for (uint32_t at = user_begin_[i]; at < user_begin_[i + 1]; ++at) {
    const auto u = static_cast<std::size_t>(users_[at]);
    if (state_[u] == kUnknown) continue;
    const std::span<const int32_t> of_user = p_.operands(u);
    for (std::size_t j = 0; j < of_user.size(); ++j) {
      if (static_cast<std::size_t>(of_user[j]) != i) continue;
      ShardingSpec wish = operand_sharding(u, j, spec_[u]);
      auto same =
          std::find_if(candidates.begin() + static_cast<std::ptrdiff_t>(forward), candidates.end(),
                       [&](const Candidate& c) { return c.spec == wish; });
      if (same != candidates.end()) {
        same->weight += 1;
      } else {
        candidates.push_back({std::move(wish), -1});
      }
    }
  }
  if (candidates.empty()) return false;
  std::optional<ShardingSpec> merged = candidates[0].spec;
  for (std::size_t c = 1; c < candidates.size() && merged; ++c) {
    merged = merge(*merged, candidates[c].spec, instr.shape.rank());
  }
  ShardingSpec chosen;
  if (merged) {
    chosen = std::move(*merged);
  } else {
    double best = 0;
    std::size_t best_at = candidates.size();
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      const ShardingSpec& choice = candidates[c].spec;
      double cost = 0;
      for (const Candidate& other : candidates) {
        if (other.operand >= 0) {
          const auto j = static_cast<std::size_t>(other.operand);
          const int32_t o = operands[j];
          cost += reshard_bytes(p_[o].shape, p_[o].dtype, spec_[o], operand_sharding(i, j, choice));
        } else {
          cost += other.weight * reshard_bytes(instr.shape, instr.dtype, choice, other.spec);
        }
      }
      if (best_at == candidates.size() || cost < best) {
        best = cost;
        best_at = c;
      }
    }
    chosen = candidates[best_at].spec;
  }
  if (state_[i] == kKnown && spec_[i] == chosen) return false;
  spec_[i] = std::move(chosen);
  state_[i] = kKnown;
  return true;
}

std::vector<ShardingSpec> Propagation::run(std::span<const ShardingSpec> inputs, int* sweeps_done) {
  const std::size_t n = p_.size();
  spec_.assign(n, ShardingSpec::replicated());
  state_.assign(n, kUnknown);
  user_begin_.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int32_t o : p_.operands(i)) ++user_begin_[o + 1];
  }
  std::partial_sum(user_begin_.begin(), user_begin_.end(), user_begin_.begin());
  users_.resize(user_begin_[n]);
  std::vector<uint32_t> fill(user_begin_.begin(), user_begin_.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (int32_t o : p_.operands(i)) users_[fill[o]++] = static_cast<int32_t>(i);
  }
  DimMap scratch;
  for (std::size_t i = 0; i < n; ++i) {
    const Program::Instr& instr = p_[i];
    if (p_.is_leaf(i)) {
      state_[i] = kFixed;
      if (instr.input >= 0 && static_cast<std::size_t>(instr.input) < inputs.size()) {
        spec_[i] = inputs[instr.input];
        check_sharding(instr.shape, spec_[i],
                       fmt::format("propagate_shardings: input {}", instr.input));
      } else if (!p_.ints(i).empty()) {
        spec_[i] = decode_sharding(p_.ints(i));
      }
    } else if (instr.op == Op::kCustomSharding) {
      state_[i] = kFixed;
      spec_[i] = decode_sharding(p_.ints(i));
    } else if (!p_.operands(i).empty() && !operand_map(p_, i, 0, scratch)) {
      state_[i] = kFixed;  // no rule: replicated
    }
  }
  int sweeps = 0;
  bool changed = true;
  while (changed && sweeps < kMaxSweeps) {
    changed = false;
    ++sweeps;
    for (std::size_t i = 0; i < n; ++i) {
      if (state_[i] != kFixed) changed = decide(i) || changed;
    }
    for (std::size_t i = n; i-- > 0;) {
      if (state_[i] != kFixed) changed = decide(i) || changed;
    }
  }
  if (sweeps_done) *sweeps_done = sweeps;
  return std::move(spec_);
}

}  // namespace

ShardingPropagation propagate_shardings_counting_sweeps(
    const Program& program, std::span<const ShardingSpec> input_shardings) {
  ShardingPropagation result;
  result.shardings = Propagation(program).run(input_shardings, &result.sweeps);
  return result;
}

std::vector<ShardingSpec> propagate_shardings(const Program& program,
                                              std::span<const ShardingSpec> input_shardings) {
  return Propagation(program).run(input_shardings, nullptr);
}

std::vector<ShardingSpec> input_shardings(const Program& program) {
  std::vector<ShardingSpec> shardings(static_cast<std::size_t>(program.num_inputs));
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (program.is_leaf(i) && program[i].input >= 0 && !program.ints(i).empty()) {
      shardings.at(static_cast<std::size_t>(program[i].input)) = decode_sharding(program.ints(i));
    }
  }
  return shardings;
}

}  // namespace axle
