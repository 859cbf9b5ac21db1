// graph: which runtime tensors use.
#include "axle/graph/tensor_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "axle/graph/tensor.h"

namespace axle {
namespace {

using tensor_runtime_internal::g_installed;
constinit std::atomic<TensorRuntime* (*)()> g_provider{nullptr};
std::mutex g_provider_mutex;

}  // namespace

namespace tensor_runtime_internal {

TensorRuntime* from_provider() {
  TensorRuntime* (*provider)() = g_provider.load(std::memory_order_acquire);
  if (!provider) return nullptr;
  std::lock_guard lock(g_provider_mutex);
  if (TensorRuntime* installed = g_installed.load(std::memory_order_acquire)) return installed;
  TensorRuntime* made = provider();
  g_installed.store(made, std::memory_order_release);
  return made;
}

}  // namespace tensor_runtime_internal

std::vector<DeviceSync> pending_by_device(std::span<const Tensor> tensors) {
  std::vector<DeviceSync> syncs;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.impl()->pending_ir()) continue;
    const Device device = t.device();
    auto it = std::ranges::find_if(syncs, [&](const DeviceSync& s) { return s.device == device; });
    if (it == syncs.end()) {
      syncs.push_back(DeviceSync{.device = device});
      it = std::prev(syncs.end());
    }
    TensorImpl* impl = t.impl();
    if (std::ranges::find(it->tensors, impl) == it->tensors.end()) it->tensors.push_back(impl);
  }
  // Tensors sharing a node share its output.
  for (DeviceSync& sync : syncs) {
    std::unordered_map<const Node*, std::size_t> index;
    sync.root_of.reserve(sync.tensors.size());
    for (TensorImpl* impl : sync.tensors) {
      const NodePtr& ir = impl->ir();
      auto [at, inserted] = index.try_emplace(ir.get(), sync.roots.size());
      if (inserted) sync.roots.push_back(ir);
      sync.root_of.push_back(at->second);
    }
  }
  return syncs;
}

TensorRuntime& require_tensor_runtime(std::string_view what) {
  if (TensorRuntime* runtime = tensor_runtime()) return *runtime;
  throw std::logic_error(fmt::format(
      "{} needs a runtime to execute graphs, and none is installed: link axle::actors and include "
      "axle.h (or install one with install_tensor_runtime)",
      what));
}

TensorRuntime* install_tensor_runtime(TensorRuntime* runtime) noexcept {
  std::lock_guard lock(g_provider_mutex);
  return g_installed.exchange(runtime, std::memory_order_acq_rel);
}

void set_default_tensor_runtime(TensorRuntime* (*provider)()) noexcept {
  g_provider.store(provider, std::memory_order_release);
}

}  // namespace axle
