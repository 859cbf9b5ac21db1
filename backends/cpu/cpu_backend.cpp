// backends/cpu: the CPU backend. Device memory is 64-byte-aligned host memory (large blocks are
// kept for reuse when freed, up to AXLE_CPU_BLOCK_CACHE_MB per device); a program runs its kernel
// calls in order on the calling (device actor's) thread, which large kernels share with the
// device's other compute threads (AXLE_CPU_INTRA_OP_THREADS).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/compute_pool.h"
#include "backends/cpu/kernel.h"
#include "engine/config.h"
#include "engine/metrics.h"

namespace axle {
namespace {

// Blocks this large are kept when freed, for the next buffer of their size: a fresh block of
// megabytes costs a page fault per 4 KiB on first touch, and a training step frees and asks for
// the same sizes every step.
constexpr std::size_t kCachedBlockMin = std::size_t{1} << 20;
constexpr std::size_t kCachedBlockGrain = std::size_t{64} << 10;

struct DeviceAccount {
  explicit DeviceAccount(std::size_t cache_limit) : cache_limit(cache_limit) {}
  ~DeviceAccount() {
    for (auto& [bytes, block] : cached) std::free(block);
  }

  std::atomic<std::size_t> in_use{0};
  std::atomic<std::size_t> peak{0};

  void add(std::size_t bytes) {
    std::size_t now = in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void remove(std::size_t bytes) { in_use.fetch_sub(bytes, std::memory_order_relaxed); }

  // The size a block of `bytes` is allocated with (cached blocks are matched by it).
  static std::size_t block_size(std::size_t bytes) {
    if (bytes >= kCachedBlockMin)
      return (bytes + kCachedBlockGrain - 1) / kCachedBlockGrain * kCachedBlockGrain;
    return std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  }
  void* allocate_block(std::size_t size) {
    if (size >= kCachedBlockMin) {
      std::lock_guard lock(cache_mutex);
      if (auto it = cached.find(size); it != cached.end()) {
        void* block = it->second;
        cached.erase(it);
        cached_bytes -= size;
        return block;
      }
    }
    void* block = std::aligned_alloc(64, size);
    if (!block) throw std::bad_alloc();
    return block;
  }
  void free_block(void* block, std::size_t size) noexcept {
    if (size >= kCachedBlockMin) {
      std::lock_guard lock(cache_mutex);
      if (cached_bytes + size <= cache_limit) {
        try {
          cached.emplace(size, block);
          cached_bytes += size;
          return;
        } catch (...) {
          // no room to remember it: free it below
        }
      }
    }
    std::free(block);
  }

  const std::size_t cache_limit;
  std::mutex cache_mutex;
  std::multimap<std::size_t, void*> cached;  // by block size
  std::size_t cached_bytes = 0;
};

class CpuMemory final : public DeviceMemory {
 public:
  CpuMemory(std::size_t bytes, std::shared_ptr<DeviceAccount> account)
      : bytes_(bytes), block_(DeviceAccount::block_size(bytes)), account_(std::move(account)) {
    data_ = account_->allocate_block(block_);
    account_->add(bytes_);
  }
  ~CpuMemory() override {
    account_->free_block(data_, block_);
    account_->remove(bytes_);
  }
  void* data() noexcept override { return data_; }
  std::size_t bytes() const noexcept override { return bytes_; }

 private:
  void* data_;
  std::size_t bytes_;
  std::size_t block_;
  std::shared_ptr<DeviceAccount> account_;
};

std::string describe_call(const Executable& program, const KernelCall& call) {
  std::string s = fmt::format("{}(", kernel_name(call.kernel));
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    const BufferDesc& d = program.slots[call.inputs[i]];
    s += fmt::format("{}{}{}", i ? ", " : "", dtype_name(d.dtype), d.shape.to_string());
  }
  const BufferDesc& out = program.slots[call.output];
  return s + fmt::format(") -> {}{}", dtype_name(out.dtype), out.shape.to_string());
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int devices) {
    if (devices < 1) throw std::invalid_argument("the CPU backend needs at least one device");
    const auto cache_limit = static_cast<std::size_t>(std::max<int64_t>(
                                 0, config::get_int("AXLE_CPU_BLOCK_CACHE_MB", 1024)))
                             << 20;
    for (int i = 0; i < devices; ++i) {
      accounts_.push_back(std::make_shared<DeviceAccount>(cache_limit));
    }
    const int threads = cpu::intra_op_threads(devices);
    for (int i = 0; i < devices; ++i) pools_.push_back(std::make_unique<cpu::ComputePool>(threads));
  }

  std::string_view hardware() const noexcept override { return "CPU"; }
  int device_count() const noexcept override { return static_cast<int>(accounts_.size()); }

  IntrusivePtr<DeviceMemory> allocate(int device, std::size_t bytes) override {
    return IntrusivePtr<DeviceMemory>(new CpuMemory(bytes, account(device)));
  }

  void copy_to_device(int device, const void* host, DeviceMemory& dst, std::size_t bytes) override {
    check_size(dst, bytes, "copy_to_device");
    if (bytes) std::memcpy(dst.data(), host, bytes);
  }

  void copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) override {
    check_size(src, bytes, "copy_to_host");
    if (bytes) std::memcpy(host, src.data(), bytes);
  }

  std::vector<IntrusivePtr<DeviceMemory>> execute(
      int device, const Executable& program,
      std::vector<IntrusivePtr<DeviceMemory>> inputs) override {
    if (inputs.size() != program.input_slots.size()) {
      throw std::invalid_argument(fmt::format("program takes {} inputs, got {}",
                                              program.input_slots.size(), inputs.size()));
    }
    std::vector<IntrusivePtr<DeviceMemory>> slots(program.slots.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const BufferDesc& desc = program.slots[program.input_slots[i]];
      if (inputs[i]->bytes() != desc.bytes()) {
        throw std::invalid_argument(fmt::format(
            "input {} holds {} bytes; the program expects {}{} ({} bytes)", i, inputs[i]->bytes(),
            dtype_name(desc.dtype), desc.shape.to_string(), desc.bytes()));
      }
      if (program.donated(i) && inputs[i]->use_count() != 1) {
        IntrusivePtr<DeviceMemory> copy = allocate(device, desc.bytes());
        std::memcpy(copy->data(), inputs[i]->data(), desc.bytes());
        inputs[i] = std::move(copy);
        AXLE_COUNTER_INC("DonatedInputCopies", 1);
      }
      slots[program.input_slots[i]] = std::move(inputs[i]);
    }
    const cpu::KernelTable& table = cpu::kernel_table();
    const MemoryPlan& plan = program.plan;
    const bool planned = !plan.empty();
    if (planned && (plan.release_begin.size() != program.calls.size() + 1 ||
                    plan.in_place.size() != program.calls.size())) {
      throw std::invalid_argument("the program's memory plan does not match its calls");
    }
    // Released buffers by size, for later slots (freed when the program ends): an output takes
    // one of its exact size, anything else the smallest one large enough.
    std::multimap<std::size_t, IntrusivePtr<DeviceMemory>> pool;
    std::vector<bool> is_output(program.slots.size(), false);
    for (int32_t s : program.output_slots) is_output.at(s) = true;
    std::vector<cpu::ConstView> views;
    for (std::size_t c = 0; c < program.calls.size(); ++c) {
      const KernelCall& call = program.calls[c];
      views.clear();
      for (int32_t in : call.inputs) views.push_back({slots[in]->data(), &program.slots[in]});
      IntrusivePtr<DeviceMemory>& out = slots[call.output];
      const std::size_t bytes = program.slots[call.output].bytes();
      if (planned && plan.in_place[c] >= 0) {
        out = std::move(slots[plan.in_place[c]]);  // the kernel writes over its dying operand
      } else if (auto it = is_output[call.output] ? pool.find(bytes) : pool.lower_bound(bytes);
                 planned && it != pool.end()) {
        out = std::move(it->second);
        pool.erase(it);
      } else {
        out = allocate(device, bytes);
      }
      cpu::KernelFn fn = table[static_cast<std::size_t>(call.kernel)];
      if (!fn) {
        throw std::logic_error(
            fmt::format("the CPU backend has no kernel for {}", describe_call(program, call)));
      }
      try {
        fn(cpu::KernelArgs{
            call, views, {out->data(), &program.slots[call.output]}, pools_.at(device).get()});
      } catch (const std::exception& e) {
        throw std::runtime_error(
            fmt::format("kernel {} failed: {}", describe_call(program, call), e.what()));
      }
      if (!planned) continue;
      for (uint32_t r = plan.release_begin[c]; r < plan.release_begin[c + 1]; ++r) {
        IntrusivePtr<DeviceMemory> released = std::move(slots.at(plan.release_slots[r]));
        // Pooled only when nothing else holds it (a slot written in place shares it).
        if (released && released->use_count() == 1) {
          const std::size_t size = released->bytes();
          pool.emplace(size, std::move(released));
        }
      }
    }
    std::vector<IntrusivePtr<DeviceMemory>> outputs;
    outputs.reserve(program.output_slots.size());
    for (int32_t slot : program.output_slots) outputs.push_back(slots[slot]);
    return outputs;
  }

  MemoryInfo memory_info(int device) const override {
    const auto& a = *accounts_.at(device);
    return {a.in_use.load(std::memory_order_relaxed), a.peak.load(std::memory_order_relaxed)};
  }

 private:
  const std::shared_ptr<DeviceAccount>& account(int device) const {
    if (device < 0 || device >= device_count()) {
      throw std::out_of_range(
          fmt::format("CPU device {} does not exist ({} devices)", device, device_count()));
    }
    return accounts_[device];
  }
  static void check_size(DeviceMemory& m, std::size_t bytes, const char* what) {
    if (m.bytes() != bytes) {
      throw std::invalid_argument(
          fmt::format("{}: buffer holds {} bytes, asked to move {}", what, m.bytes(), bytes));
    }
  }

  std::vector<std::shared_ptr<DeviceAccount>> accounts_;
  std::vector<std::unique_ptr<cpu::ComputePool>> pools_;  // per device
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int devices) {
  return std::make_unique<CpuBackend>(devices);
}

namespace cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t{};
    register_elementwise_kernels(t);
    register_reduce_kernels(t);
    register_linalg_kernels(t);
    register_conv_kernels(t);
    register_data_movement_kernels(t);
    register_random_kernels(t);
    register_fused_kernels(t);
    register_scatter_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace cpu
}  // namespace axle
