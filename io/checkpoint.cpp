// io: checkpoints of device tensors, written and read through the checkpoint codec
// (graph/formats/checkpoint_codec.h) one tensor at a time.
#include "axle/io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "axle/actors/host/api.h"
#include "axle/actors/host/replicas.h"
#include "axle/engine/metrics.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"

namespace axle {
namespace {

void write_checkpoint(const nn::StateDict& state, const std::filesystem::path& path) {
  CheckpointWriter out(path, state.size());
  for (const auto& [name, tensor] : state) {
    if (!tensor.defined()) throw FileError(path, fmt::format("key \"{}\" is undefined", name));
    const CpuTensor host = tensor.cpu();  // the one tensor on the host
    AXLE_METRIC_ADD("CheckpointHostBytes", MetricKind::kBytes,
                    static_cast<double>(host.bytes.size()));
    out.add(name, host);
  }
  out.commit();
}

}  // namespace

void save(const nn::StateDict& state, const std::filesystem::path& path, bool master_only,
          bool global_master) {
  const bool replicated = world_size() > 1;
  // Pending values are computed by every replica, as they would be at its next mark_step: a
  // graph with collectives that the master alone ran would wait for the others forever.
  if (replicated && std::ranges::any_of(state, [](const auto& entry) {
        return entry.second.defined() && entry.second.impl()->pending_ir();
      })) {
    mark_step();
  }
  if (!master_only || is_master_ordinal(/*local=*/!global_master)) write_checkpoint(state, path);
  // As torch_xla's xm.save: every replica returns once the file is there.
  if (replicated) rendezvous("axle::save");
}

nn::StateDict load(const std::filesystem::path& path, Device device) {
  CheckpointReader in(path);
  nn::StateDict state;
  while (std::optional<CheckpointEntry> entry = in.next()) {
    Tensor t =
        tensor_from_bytes(entry->tensor.bytes, entry->tensor.dtype, entry->tensor.shape, device);
    (void)t.impl()->data()->wait();  // on the device before the next tensor comes to the host
    state.emplace_back(std::move(entry->name), std::move(t));
  }
  return state;
}

}  // namespace axle
