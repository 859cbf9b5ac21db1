// io: what one step's directory of CheckpointManager holds, file by file — the tensors of the
// model, the optimizer and the caller (tensors.ckpt, by prefix), the host state (state.json:
// step, the groups' rates, the scheduler, under SPMD each value's layout), each replica's random
// streams and data loader position (rng.<ordinal>.json) and per_replica values
// (replica.<ordinal>.ckpt) — written and read back, each read checked
// against the state restored into before anything changes. CheckpointManager's own part, not
// installed as API.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "axle/graph/sharding.h"
#include "axle/graph/trace_context.h"
#include "axle/io/training_state.h"

namespace axle::checkpoint_step {

inline constexpr const char* kTensorsFile = "tensors.ckpt";
inline constexpr const char* kStateFile = "state.json";
// The prefixes that keep the model's, the optimizer's and the caller's tensors apart in one file.
inline constexpr std::string_view kModel = "model/";
inline constexpr std::string_view kOptimizer = "optimizer/";
inline constexpr std::string_view kExtra = "extra/";
// ... and a replica's per_replica tensors from the rest of its own.
inline constexpr std::string_view kPerReplica = "per_replica/";

/// A replica's random streams, and its per_replica values.
[[nodiscard]] std::string streams_file(int ordinal);
[[nodiscard]] std::string per_replica_file(int ordinal);
/// Under SPMD, the tiles mesh device `device` writes (io/checkpoint_tiles.h).
[[nodiscard]] std::string tiles_file(int64_t device);

/// `text` as the whole of `file`, atomically.
void write_text(const std::filesystem::path& file, const std::string& text);
/// `file` parsed; FileError when it is missing or not JSON.
[[nodiscard]] nlohmann::json read_json(const std::filesystem::path& file);

/// The model's, the optimizer's and the extra tensors, under their prefixes.
[[nodiscard]] nn::StateDict tensors_of(const TrainingState& state);
/// What the master saves in tensors.ckpt: tensors_of(state), unless the state is sharded.
[[nodiscard]] nn::StateDict master_tensors_of(const TrainingState& state);
/// What each replica saves in its own file: its per_replica tensors (under kPerReplica), and
/// tensors_of(state) when the state is sharded.
[[nodiscard]] nn::StateDict replica_tensors_of(const TrainingState& state);
/// Whether any of `tensors` is still to be computed (a pending value).
[[nodiscard]] bool any_pending(const nn::StateDict& tensors);
/// `tensors` copied to the host one at a time and written to `file`.
void write_tensors(const nn::StateDict& tensors, const std::filesystem::path& file);
/// The saved tensors in the file's order, each on the device of the entry of its name in
/// `targets` (the replica's default device for one it lacks). Under SPMD each is laid out over
/// the mesh as its target is, or, for one without a layout of its own (optimizer state not yet
/// created), as `layouts` (spmd_layouts) says it was saved when that fits the mesh.
[[nodiscard]] nn::StateDict read_tensors(const std::filesystem::path& file,
                                         const nn::StateDict& targets,
                                         const nlohmann::json& layouts);
/// A saved value `saved` of key `name` as read_tensors makes it: on `target`'s device (the
/// default one without a target) and, under SPMD, laid out as read_tensors says.
[[nodiscard]] Tensor restored_tensor(const std::string& name, const CpuTensor& saved,
                                     const Tensor* target, const nlohmann::json& layouts,
                                     const std::filesystem::path& file);
/// `targets`' defined entries by name.
[[nodiscard]] std::unordered_map<std::string, const Tensor*> defined_by_name(
    const nn::StateDict& targets);
/// Under SPMD, gives each of `targets` without a sharding of its own (a parameter the user did
/// not mark) the layout of the value of its name in `restored`, as the steps before the save had
/// given it: a step's outputs carry their layouts into the next step's program, so the steps
/// after a restore run the programs the run that was not stopped ran.
void adopt_layouts(const nn::StateDict& targets, const nn::StateDict& restored);
/// The entries of `saved` under `prefix`, without it.
[[nodiscard]] nn::StateDict part(const nn::StateDict& saved, std::string_view prefix);
/// The caller's tensors of one kind ("extra", "per_replica") in its order, each replaced by its
/// saved value; nn::StateDictError naming `file` when the names differ.
[[nodiscard]] nn::StateDict restored_entries(std::string_view kind, const nn::StateDict& mine,
                                             const nn::StateDict& saved,
                                             const std::filesystem::path& file);

/// Each entry's name, dtype and shape, which every replica must agree on (std::invalid_argument
/// for an undefined one).
[[nodiscard]] nlohmann::json per_replica_layout(const nn::StateDict& per_replica);
/// The per_replica values on the host, one after another, as they go to the master.
[[nodiscard]] std::string host_bytes_of(const nn::StateDict& per_replica);
/// A replica's per_replica values cut out of `bytes` by the agreed layout.
[[nodiscard]] std::vector<std::pair<std::string, CpuTensor>> host_tensors(
    const nlohmann::json& layout, const std::string& bytes);
/// This replica's own file read for `targets` (replica_tensors_of): nn::StateDictError when it
/// is missing though `targets` is not empty, or there though it is.
[[nodiscard]] nn::StateDict read_replica_tensors(const nn::StateDict& targets,
                                                 const std::filesystem::path& file);
/// This replica's per_replica values out of its file's tensors, in the order of `per_replica`,
/// checked against it (names, shapes, dtypes).
[[nodiscard]] nn::StateDict restored_per_replica(const nn::StateDict& per_replica,
                                                 const nn::StateDict& saved,
                                                 const std::filesystem::path& file);

/// state.json's content: the step, the groups' rates, the scheduler's state; under SPMD, the
/// layouts of tensors_of(state) (spmd_layouts) and how their tiles were saved (tile_layouts).
[[nodiscard]] nlohmann::json host_state(int64_t step, const TrainingState& state);
/// How each of `tensors` laid out over the SPMD mesh is sharded (its encoded ShardingSpec, by
/// name), after the step that computed them: what read_tensors lays a value out as when nothing
/// else says how.
[[nodiscard]] nlohmann::json spmd_layouts(const nn::StateDict& tensors);
/// How `tensor`'s data is laid out over the SPMD mesh (replicated for data held whole).
[[nodiscard]] ShardingSpec data_layout(const Tensor& tensor);
/// Each of `tensors`' global shape and data_layout, in their order: state.json's "spmd_tiles",
/// by which a restore puts a step saved as tiles together again.
[[nodiscard]] nlohmann::json tile_layouts(const nn::StateDict& tensors);
/// The layouts a step's state.json holds (empty for a step saved without SPMD).
[[nodiscard]] nlohmann::json saved_layouts(const nlohmann::json& host_state);
/// A step's host state, read and checked against the state restored into.
struct HostState {
  std::vector<std::pair<double, std::optional<double>>> group_rates;  // lr, initial_lr
  optim::LRSchedulerState scheduler;
};
[[nodiscard]] HostState read_host_state(const nlohmann::json& saved,
                                        const std::filesystem::path& file,
                                        const TrainingState& state);
void apply_host_state(const HostState& saved, TrainingState& state);

/// This replica's random streams (every device's seed and position) and the position of its data
/// loader (state.data_loader, when set), as rng.<ordinal>.json.
[[nodiscard]] nlohmann::json replica_host_state(const TrainingState& state);
/// What a replica saved in `file` (replica_host_state), checked against `state` before anything
/// changes: nn::StateDictError naming the file for a data loader the step has no position of, or
/// a position of other batches.
struct ReplicaHostState {
  std::unordered_map<int, RngState> streams;  // by device
  std::optional<DataLoaderState> data_loader;
};
[[nodiscard]] ReplicaHostState read_replica_host_state(const std::filesystem::path& file,
                                                       const TrainingState& state);

}  // namespace axle::checkpoint_step
