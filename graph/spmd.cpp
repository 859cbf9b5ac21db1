// graph: sharding annotations (see spmd.h).
#include "axle/graph/spmd.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "axle/graph/op_util.h"
#include "axle/graph/tensor_runtime.h"

namespace axle::spmd {
namespace {

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) p *= v;
  return p;
}

// torch_xla builds the hybrid mesh with np.block: one block per process (granule) laid out as
// `dcn`, each block the process's devices reshaped to `ici`. Along axis a, position
// dcn_index * ici[a] + ici_index.
std::vector<int64_t> hybrid_device_ids(const std::vector<int64_t>& ici,
                                       const std::vector<int64_t>& dcn) {
  if (ici.size() != dcn.size()) {
    throw std::invalid_argument(
        fmt::format("HybridMesh: ici_mesh_shape ({}) and dcn_mesh_shape ({}) differ in length",
                    fmt::join(ici, ", "), fmt::join(dcn, ", ")));
  }
  for (std::size_t a = 0; a < ici.size(); ++a) {
    if (ici[a] < 1 || dcn[a] < 1) {
      throw std::invalid_argument(
          fmt::format("HybridMesh: mesh sizes must be at least 1, got ici ({}) and dcn ({})",
                      fmt::join(ici, ", "), fmt::join(dcn, ", ")));
    }
  }
  const int axes = static_cast<int>(ici.size());
  const int64_t local = product(ici);
  const int64_t total = local * product(dcn);
  std::vector<int64_t> shape(ici.size());
  for (int a = 0; a < axes; ++a) shape[a] = ici[a] * dcn[a];
  std::vector<int64_t> ids(static_cast<std::size_t>(total));
  std::vector<int64_t> coords(ici.size(), 0);  // over the mesh's shape
  for (int64_t n = 0; n < total; ++n) {
    int64_t process = 0;
    int64_t device = 0;
    for (int a = 0; a < axes; ++a) {
      process = process * dcn[a] + coords[a] / ici[a];
      device = device * ici[a] + coords[a] % ici[a];
    }
    ids[static_cast<std::size_t>(n)] = process * local + device;
    for (int a = axes - 1; a >= 0; --a) {
      if (++coords[a] < shape[a]) break;
      coords[a] = 0;
    }
  }
  return ids;
}

std::vector<int64_t> hybrid_shape(const std::vector<int64_t>& ici,
                                  const std::vector<int64_t>& dcn) {
  std::vector<int64_t> shape(ici.size());
  for (std::size_t a = 0; a < ici.size() && a < dcn.size(); ++a) shape[a] = ici[a] * dcn[a];
  return shape;
}

}  // namespace

HybridMesh::HybridMesh(std::vector<int64_t> ici_mesh_shape, std::vector<int64_t> dcn_mesh_shape,
                       std::vector<std::string> axis_names)
    : Mesh(hybrid_device_ids(ici_mesh_shape, dcn_mesh_shape),
           hybrid_shape(ici_mesh_shape, dcn_mesh_shape), std::move(axis_names)) {}

const Tensor& mark_sharding(const Tensor& tensor, const Mesh& mesh,
                            const PartitionSpec& partition_spec, std::source_location where) {
  ops::require_defined("mark_sharding", tensor, "the tensor", where);
  ShardingSpec sharding;
  try {
    sharding = mesh.sharding(partition_spec, tensor.dim());
    check_sharding(tensor.shape(), sharding, "mark_sharding");
  } catch (const std::exception& e) {
    ops::fail("mark_sharding",
              fmt::format("cannot shard {} by partition spec {} on a mesh of shape ({}): {}",
                          ops::describe(tensor), to_string(partition_spec),
                          fmt::join(mesh.mesh_shape(), ", "), e.what()),
              where);
  }
  const int64_t key = intern_sharding(sharding);
  TensorImpl& impl = *tensor.impl();
  if (!impl.pending_ir()) {
    // Device data: under SPMD its shards move now (as torch_xla's); its leaf carries the key.
    if (TensorRuntime* runtime = tensor_runtime()) {
      IntrusivePtr<DeviceData> laid_out = runtime->reshard(impl.data(), key);
      if (laid_out != impl.data()) impl.set_data(std::move(laid_out));
    }
    impl.set_sharding(key);
    return tensor;
  }
  impl.set_sharding(key);
  // A computed value: annotate it, in place. A new annotation replaces the one it has.
  NodePtr value = impl.ir();
  if (value->op() == Op::kCustomSharding) {
    if (value->ints()[0] == key) return tensor;
    value = value->operands()[0];
  }
  Tensor annotated =
      ops::make_result(Op::kCustomSharding, tensor.dtype(), tensor.shape(),
                       Operands{std::move(value)}, tensor.device(), where, IntAttrs{key});
  if (annotated.impl()->pending_ir()) {
    impl.set_ir(annotated.impl()->ir());
  } else {
    impl.set_data(annotated.impl()->data());  // (a runtime that executes every op)
    impl.set_sharding(key);
  }
  return tensor;
}

Tensor tensor_from_host_sharded(const CpuTensor& host, const Mesh& mesh,
                                const PartitionSpec& partition_spec, Device device,
                                std::source_location where) {
  ShardingSpec sharding;
  try {
    sharding = mesh.sharding(partition_spec, host.shape.rank());
    check_sharding(host.shape, sharding, "tensor_from_host_sharded");
  } catch (const std::exception& e) {
    ops::fail("tensor_from_host_sharded",
              fmt::format("cannot shard {} by partition spec {} on a mesh of shape ({}): {}",
                          ops::describe(host.dtype, host.shape), to_string(partition_spec),
                          fmt::join(mesh.mesh_shape(), ", "), e.what()),
              where);
  }
  return tensor_from_bytes_sharded(host.bytes, host.dtype, host.shape, device,
                                   intern_sharding(sharding), where);
}

void clear_sharding(const Tensor& tensor) {
  if (!tensor.defined()) return;
  TensorImpl& impl = *tensor.impl();
  impl.set_sharding(-1);
  if (!impl.pending_ir() && impl.data()) {
    if (TensorRuntime* runtime = tensor_runtime()) {
      IntrusivePtr<DeviceData> replicated = runtime->reshard(impl.data(), -1);
      if (replicated != impl.data()) impl.set_data(std::move(replicated));
    }
    return;
  }
  if (impl.pending_ir() && impl.ir()->op() == Op::kCustomSharding) {
    const NodePtr value = impl.ir()->operands()[0];
    if (value->op() == Op::kDeviceData) {
      impl.set_data(value->data());
    } else {
      impl.set_ir(value);
    }
  }
}

std::optional<ShardingSpec> sharding(const Tensor& tensor) {
  if (!tensor.defined() || tensor.impl()->sharding() < 0) return std::nullopt;
  return interned_sharding(tensor.impl()->sharding());
}

std::string get_sharding_spec(const Tensor& tensor) {
  const std::optional<ShardingSpec> spec = sharding(tensor);
  return spec ? to_string(*spec) : std::string();
}

}  // namespace axle::spmd

namespace axle {

CpuTensor Mesh::get_logical_mesh() const { return CpuTensor(device_ids_, Shape(shape_)); }

}  // namespace axle
