// graph/formats: FSDP's shard metadata as text, and consolidating sharded checkpoint files on the
// host, one replica's file at a time.
#include "axle/graph/formats/shard_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "axle/graph/formats/checkpoint_codec.h"

namespace axle {
namespace {

constexpr std::string_view kWrapped = "_fsdp_wrapped_module.";

std::string strip_wrapper(std::string name) {
  for (std::size_t at; (at = name.find(kWrapped)) != std::string::npos;) {
    name.erase(at, kWrapped.size());
  }
  return name;
}

// The element count of `dims`, or nullopt when it does not fit in int64.
std::optional<int64_t> checked_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  // A later 0 does not make an earlier overflow fit: numel() multiplies in order too.
  return n;
}

}  // namespace

std::string ShardMetadata::to_text() const {
  std::string out =
      fmt::format("axle_fsdp_shard_metadata 1\nworld_size {}\nrank {}\n", world_size, rank);
  for (const FlatParameterInfo& flat : flat_params) {
    out += fmt::format("flat {} {} {} {} {} {}\n", flat.name, static_cast<int>(flat.dtype),
                       flat.padded_numel, flat.dim_0 ? 1 : 0, flat.shard_shape.size(),
                       fmt::join(flat.shard_shape, " "));
    for (const ShardedParameterInfo& p : flat.params) {
      out += fmt::format("param {} {} {} {} {} {}\n", p.offset, p.numel, p.shape.size(),
                         fmt::join(p.shape, " "), p.names.size(), fmt::join(p.names, " "));
    }
  }
  return out;
}

ShardMetadata ShardMetadata::from_text(const std::string& text) {
  std::istringstream in(text);
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("shard metadata: " + what);
  };
  std::string word;
  int version = 0;
  if (!(in >> word >> version) || word != "axle_fsdp_shard_metadata" || version != 1) {
    bad("not axle's FSDP shard metadata (version 1)");
  }
  ShardMetadata meta;
  if (!(in >> word >> meta.world_size) || word != "world_size" || meta.world_size < 1) {
    bad("world_size is missing");
  }
  if (!(in >> word >> meta.rank) || word != "rank" || meta.rank < 0 ||
      meta.rank >= meta.world_size) {
    bad("rank is missing or out of range");
  }
  auto read_dims = [&](std::vector<int64_t>& dims) {
    std::size_t n = 0;
    if (!(in >> n) || n > static_cast<std::size_t>(Shape::kMaxRank)) bad("a shape is damaged");
    dims.resize(n);
    for (auto& d : dims) {
      if (!(in >> d) || d < 0) bad("a shape is damaged");
    }
    if (!checked_numel(dims)) bad("a shape's size does not fit in 64 bits");
  };
  while (in >> word) {
    if (word == "flat") {
      FlatParameterInfo flat;
      int dtype = 0, dim_0 = 0;
      if (!(in >> flat.name >> dtype >> flat.padded_numel >> dim_0) || dtype < 0 ||
          dtype >= kNumDTypes || flat.padded_numel < 0) {
        bad("a flat parameter's line is damaged");
      }
      flat.dtype = static_cast<DType>(dtype);
      flat.dim_0 = dim_0 != 0;
      read_dims(flat.shard_shape);
      meta.flat_params.push_back(std::move(flat));
    } else if (word == "param") {
      if (meta.flat_params.empty()) bad("a parameter comes before any flat parameter");
      ShardedParameterInfo p;
      if (!(in >> p.offset >> p.numel) || p.offset < 0 || p.numel < 0) {
        bad("a parameter's line is damaged");
      }
      read_dims(p.shape);
      if (checked_numel(p.shape) != p.numel) bad("a parameter's shape does not hold its numel");
      // Each name takes at least two characters of the text (a space and itself): a larger
      // count is damage, not a reason to allocate.
      std::size_t names = 0;
      if (!(in >> names) || names == 0 || names > text.size() / 2) bad("a parameter has no name");
      p.names.resize(names);
      for (auto& n : p.names) {
        if (!(in >> n)) bad("a parameter's names are cut short");
      }
      meta.flat_params.back().params.push_back(std::move(p));
    } else {
      bad("unexpected \"" + word.substr(0, 40) + "\"");
    }
  }
  return meta;
}

ShardFile read_shard_file(const std::filesystem::path& path) {
  ShardFile shard{.path = path};
  CheckpointReader in(path);
  std::optional<CpuTensor> text;
  while (std::optional<CheckpointEntry> entry = in.next()) {
    if (entry->name == "shard_metadata") {
      text = std::move(entry->tensor);
      continue;
    }
    shard.order.push_back(entry->name);
    shard.tensors.emplace(std::move(entry->name), std::move(entry->tensor));
  }
  if (!text || text->dtype != DType::kInt32) {
    throw std::invalid_argument(
        fmt::format("consolidate_sharded_model_checkpoints: {} has no \"shard_metadata\" (save "
                    "FullyShardedDataParallel::sharded_checkpoint())",
                    path.string()));
  }
  // One character per I32 element, as sharded_checkpoint() stores the text.
  std::string chars(text->bytes.size() / sizeof(int32_t), '\0');
  for (std::size_t i = 0; i < chars.size(); ++i) {
    int32_t c = 0;
    std::memcpy(&c, text->bytes.data() + i * sizeof(int32_t), sizeof(int32_t));
    chars[i] = static_cast<char>(c);
  }
  try {
    shard.metadata = ShardMetadata::from_text(chars);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(
        fmt::format("consolidate_sharded_model_checkpoints: {}: {}", path.string(), e.what()));
  }
  return shard;
}

ConsolidatedState consolidate_shards(const std::vector<ShardFile>& shards,
                                     std::string_view pattern) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("consolidate_sharded_model_checkpoints: " + what);
  };
  if (shards.empty()) fail(fmt::format("no file matches \"{}\"", pattern));
  const int world = shards.front().metadata.world_size;
  // By rank, from the files there are: a damaged world size must not size an allocation.
  std::map<int, const ShardFile*> ranks;
  for (const ShardFile& shard : shards) {
    if (shard.metadata.world_size != world) {
      fail(fmt::format("{} is of {} replicas, {} of {}", shard.path.string(),
                       shard.metadata.world_size, shards.front().path.string(), world));
    }
    const auto [at, added] = ranks.emplace(shard.metadata.rank, &shard);
    if (!added) {
      fail(fmt::format("{} and {} are both rank {}", at->second->path.string(), shard.path.string(),
                       shard.metadata.rank));
    }
  }
  std::vector<const ShardFile*> by_rank;
  for (int r = 0; r < world; ++r) {
    const auto it = ranks.find(r);
    if (it == ranks.end())
      fail(fmt::format("no file of rank {} of {} matches \"{}\"", r, world, pattern));
    by_rank.push_back(it->second);
  }

  ConsolidatedState state;
  std::unordered_set<std::string> flat_names;
  for (const FlatParameterInfo& flat : by_rank[0]->metadata.flat_params) {
    flat_names.insert(flat.name);
    // The shards in rank order are the padded flat value (rows of it, for dim 0).
    std::vector<std::byte> bytes;
    for (const ShardFile* shard : by_rank) {
      const auto it = shard->tensors.find(flat.name);
      if (it == shard->tensors.end()) {
        fail(fmt::format("{} has no \"{}\"", shard->path.string(), flat.name));
      }
      const std::vector<int64_t> dims(it->second.shape.dims().begin(),
                                      it->second.shape.dims().end());
      if (it->second.dtype != flat.dtype || dims != flat.shard_shape) {
        fail(fmt::format("\"{}\" of {} is not the shard its metadata describes", flat.name,
                         shard->path.string()));
      }
      bytes.insert(bytes.end(), it->second.bytes.begin(), it->second.bytes.end());
    }
    const std::size_t size = dtype_size(flat.dtype);
    if (bytes.size() % size != 0 ||
        bytes.size() / size != static_cast<uint64_t>(flat.padded_numel)) {
      fail(fmt::format("the shards of \"{}\" hold {} bytes, not {} elements", flat.name,
                       bytes.size(), flat.padded_numel));
    }
    for (const ShardedParameterInfo& p : flat.params) {
      // from_text checked that both are non-negative and that the shape holds numel elements.
      if (p.offset > flat.padded_numel || p.numel > flat.padded_numel - p.offset) {
        fail(fmt::format("\"{}\" lies outside \"{}\"", p.names.front(), flat.name));
      }
      CpuTensor t(flat.dtype, Shape(p.shape));
      const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(p.offset * size);
      t.bytes.assign(begin, begin + static_cast<std::ptrdiff_t>(p.numel * size));
      for (const std::string& name : p.names) {
        state.order.push_back(name);
        state.tensors.emplace(name, t);
      }
    }
  }
  // Buffers, from rank 0.
  for (const std::string& name : by_rank[0]->order) {
    if (flat_names.contains(name)) continue;
    std::string own = strip_wrapper(name);
    state.tensors.emplace(own, by_rank[0]->tensors.at(name));
    state.order.push_back(std::move(own));
  }
  return state;
}

}  // namespace axle
