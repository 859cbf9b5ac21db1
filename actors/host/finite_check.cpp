#include "axle/actors/host/finite_check.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <unordered_map>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/spmd_runtime.h"
#include "axle/actors/runtime/device_actor.h"
#include "axle/engine/element.h"
#include "axle/graph/reference/evaluator.h"

namespace axle {
namespace {

// What the first non-finite element of `bytes` is ("NaN", "infinity"), or nothing.
std::optional<std::string_view> non_finite(DType dtype, const std::vector<std::byte>& bytes) {
  if (!is_floating(dtype)) return std::nullopt;
  const std::size_t size = dtype_size(dtype);
  for (std::size_t at = 0; at + size <= bytes.size(); at += size) {
    const double value = load_element(dtype, bytes.data() + at);
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return "infinity";
  }
  return std::nullopt;
}

std::vector<std::byte> read_to_host(const IntrusivePtr<DeviceData>& data) {
  return read_device_data(LazySystem::get(), data).get();
}

std::string described(const Node& node) {
  return fmt::format("{} {}{}", op_name(node.op()), dtype_name(node.dtype()),
                     node.shape().to_string());
}

std::string traced_at(const Node& node) {
  if (!node.where().known()) return "at an unknown line";
  return fmt::format("traced at {}:{}", node.where().file(), node.where().line());
}

}  // namespace

void check_step_finite(const StepGraph& graph, std::span<const IntrusivePtr<DeviceData>> outputs,
                       const std::source_location& where) {
  std::optional<std::string_view> found;
  std::size_t output = 0;
  for (; output < outputs.size() && !found; ++output) {
    const IntrusivePtr<DeviceData>& data = outputs[output];
    if (!is_floating(data->dtype()) || data->failed()) continue;
    found = non_finite(data->dtype(), read_to_host(data));
  }
  if (!found) return;
  --output;
  const std::string step =
      fmt::format("AXLE_CHECK_FINITE: the step cut at {}:{} produced {} (in its result {}, {}{})",
                  where.file_name(), where.line(), *found, output,
                  dtype_name(outputs[output]->dtype()), outputs[output]->shape().to_string());

  // The inputs as the device holds them; one already not finite came from an earlier step.
  std::unordered_map<const DeviceData*, CpuTensor> inputs;
  for (int32_t id : graph.inputs) {
    const Node& leaf = *graph.nodes[static_cast<std::size_t>(id)];
    if (leaf.op() != Op::kDeviceData) continue;
    const IntrusivePtr<DeviceData>& data = leaf.data();
    CpuTensor value(data->dtype(), data->shape(), read_to_host(data));
    if (std::optional<std::string_view> bad = non_finite(value.dtype, value.bytes)) {
      throw NonFiniteError(
          fmt::format("{}: its input {} already held {} (an earlier step or an upload made it)",
                      step, described(leaf), *bad));
    }
    inputs.emplace(data.get(), std::move(value));
  }
  std::optional<std::size_t> first;
  std::string_view what;
  (void)reference::evaluate(
      graph, [&](const DeviceData& data) -> const CpuTensor& { return inputs.at(&data); },
      [&](std::size_t id, const CpuTensor& value) {
        if (std::optional<std::string_view> bad = non_finite(value.dtype, value.bytes)) {
          first = id;
          what = *bad;
          return false;
        }
        return true;
      });
  if (!first) {
    throw NonFiniteError(fmt::format(
        "{}; evaluated again op by op in double precision, no op gives a NaN or an infinity, so "
        "float32 rounding or accumulation order made it",
        step));
  }
  const Node& node = *graph.nodes[*first];
  throw NonFiniteError(fmt::format("{}: the first op to produce {} is {}, {}, from finite operands",
                                   step, what, described(node), traced_at(node)));
}

}  // namespace axle
