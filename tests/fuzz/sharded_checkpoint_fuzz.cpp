// tests/fuzz: FSDP's sharded checkpoint files (graph/formats/shard_metadata.h) through
// read_shard_file and consolidate_shards, as consolidate_sharded_model_checkpoints uses them. An
// input is up to kMaxFiles replicas' files separated by kSeparator, or (starting with kTextMode)
// their shard metadata texts alone. A damaged checkpoint file must throw FileError; metadata that
// is damaged or shards that do not add up, std::invalid_argument.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "axle/graph/formats/error.h"
#include "axle/graph/formats/shard_metadata.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/sharded_checkpoint_input.h"

namespace {

// Text mode: the replicas' metadata texts alone, each given a tensor of its flat parameters'
// shard shapes (when small), so that mutations reach consolidation past the checkpoint
// checksums that guard the metadata in a file.
void consolidate_texts(const std::vector<std::string_view>& texts) {
  std::vector<axle::ShardFile> shards;
  for (std::string_view text : texts) {
    axle::ShardFile shard{.path = "text"};
    shard.metadata = axle::ShardMetadata::from_text(std::string(text));
    for (const axle::FlatParameterInfo& flat : shard.metadata.flat_params) {
      const axle::Shape shape(flat.shard_shape);
      const auto bytes = static_cast<std::size_t>(shape.numel()) * axle::dtype_size(flat.dtype);
      if (bytes > (std::size_t{1} << 16)) continue;
      shard.tensors.emplace(flat.name,
                            axle::CpuTensor(flat.dtype, shape, std::vector<std::byte>(bytes)));
      shard.order.push_back(flat.name);
    }
    shards.push_back(std::move(shard));
  }
  (void)axle::consolidate_shards(shards, "text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static std::vector<std::unique_ptr<axle::fuzz::ScratchFile>> files = [] {
    std::vector<std::unique_ptr<axle::fuzz::ScratchFile>> made;
    for (int i = 0; i < axle::fuzz::kMaxFiles; ++i) {
      made.push_back(
          std::make_unique<axle::fuzz::ScratchFile>("-rank" + std::to_string(i) + ".ckpt"));
    }
    return made;
  }();
  const std::vector<std::string_view> parts =
      axle::fuzz::split_shard_files(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    std::vector<axle::ShardFile> shards;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& path =
          files[i]->write(reinterpret_cast<const uint8_t*>(parts[i].data()), parts[i].size());
      shards.push_back(axle::read_shard_file(path));
    }
    const axle::ConsolidatedState state = axle::consolidate_shards(shards, "fuzz-rank*.ckpt");
    for (const std::string& name : state.order) {
      const auto it = state.tensors.find(name);
      axle::fuzz::check(it != state.tensors.end(), "every name in order has its tensor");
      const int64_t numel = it->second.shape.numel();
      axle::fuzz::check(it->second.bytes.size() ==
                            static_cast<std::size_t>(numel) * axle::dtype_size(it->second.dtype),
                        "a tensor's bytes fill its shape");
    }
  } catch (const axle::FileError&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
