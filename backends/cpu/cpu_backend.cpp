// backends/cpu: the CPU backend. Device memory is 64-byte-aligned host memory (blocks of 4 KiB
// and more are kept for reuse when freed, up to AXLE_CPU_BLOCK_CACHE_MB per device); a program
// runs its kernel calls in order on the calling (device actor's) thread, stopping at collectives;
// large kernels share the work with the device's other compute threads (AXLE_CPU_INTRA_OP_THREADS).
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/backends/backend.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/engine/metrics.h"

namespace axle {
namespace {

// Blocks this large are kept when freed, for the next buffer of their size: a fresh block of
// megabytes costs a page fault per 4 KiB on first touch, and a training step frees and asks for
// the same sizes every step. Down to 64 KiB (an MLP's activations, a batch of images): given back
// to malloc, such blocks come and go on different threads every step, and glibc, which moves its
// mmap threshold up past them, keeps them in per-thread heaps that fragment over a long run. Down
// to 4 KiB (a small layer's gradients, a combined all-reduce's parts): glibc's aligned allocation
// bypasses its per-thread caches, and took 4% of a small step's time.
constexpr std::size_t kCachedBlockMin = std::size_t{4} << 10;
constexpr std::size_t kCachedBlockGrain = std::size_t{4} << 10;
// From 1 MiB, sizes round up to 64 KiB: fewer distinct sizes to keep.
constexpr std::size_t kLargeBlockMin = std::size_t{1} << 20;
constexpr std::size_t kLargeBlockGrain = std::size_t{64} << 10;
// From 2 MiB, blocks are mapped whole on 2 MiB boundaries and offered transparent huge pages: a
// first touch then faults once per 2 MiB instead of once per 4 KiB. Measured on a virtual machine
// whose faults cost about 15 us each, an 8 MiB product output written into fresh 4 KiB pages
// took 29-36 ms against 3 ms, and 3.5 ms with huge pages.
constexpr std::size_t kHugeBlockMin = std::size_t{2} << 20;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// A block of `size` (>= kHugeBlockMin) on a huge-page boundary; nullptr when mapping fails.
void* map_huge_block(std::size_t size) noexcept {
  // Mapped a huge page larger, then trimmed to the boundary inside it.
  const std::size_t span = size + kHugePage;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + size;
  if (start + span > end) ::munmap(reinterpret_cast<void*>(end), start + span - end);
#if defined(MADV_HUGEPAGE)
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint: may be refused
#endif
  return reinterpret_cast<void*>(aligned);
}

struct DeviceAccount {
  explicit DeviceAccount(std::size_t cache_limit) : cache_limit(cache_limit) {}
  ~DeviceAccount() {
    for (auto& [bytes, blocks] : cached) {
      for (void* block : blocks) release_block(block, bytes);
    }
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
    if (bytes >= kLargeBlockMin)
      return (bytes + kLargeBlockGrain - 1) / kLargeBlockGrain * kLargeBlockGrain;
    if (bytes >= kCachedBlockMin)
      return (bytes + kCachedBlockGrain - 1) / kCachedBlockGrain * kCachedBlockGrain;
    return std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  }
  void* allocate_block(std::size_t size) {
    if (size >= kCachedBlockMin) {
      std::lock_guard lock(cache_mutex);
      if (auto it = cached.find(size); it != cached.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        cached_bytes -= size;
        return block;
      }
    }
    void* block = size >= kHugeBlockMin ? map_huge_block(size) : std::aligned_alloc(64, size);
    if (!block) throw std::bad_alloc();
    return block;
  }
  // Gives a block back to the system (sizes from block_size, so a block's origin is its size's).
  static void release_block(void* block, std::size_t size) noexcept {
    if (size >= kHugeBlockMin) {
      ::munmap(block, size);
    } else {
      std::free(block);
    }
  }
  void free_block(void* block, std::size_t size) noexcept {
    if (size >= kCachedBlockMin) {
      std::lock_guard lock(cache_mutex);
      if (cached_bytes + size <= cache_limit) {
        try {
          cached[size].push_back(block);
          cached_bytes += size;
          return;
        } catch (...) {
          // no room to remember it: free it below
        }
      }
    }
    release_block(block, size);
  }

  const std::size_t cache_limit;
  std::mutex cache_mutex;
  // By block size, the last freed last: handed out first, it is the likeliest in the caches. A
  // size's vector stays once made, so that keeping and taking a block allocates nothing.
  std::map<std::size_t, std::vector<void*>> cached;
  std::size_t cached_bytes = 0;
};

class CpuMemory final : public DeviceMemory {
 public:
  // `counted`: its bytes count on the account's device (memory several devices share counts on
  // each through its CpuShare instead).
  CpuMemory(std::size_t bytes, std::shared_ptr<DeviceAccount> account, bool counted = true)
      : bytes_(bytes),
        block_(DeviceAccount::block_size(bytes)),
        counted_(counted),
        account_(std::move(account)) {
    data_ = account_->allocate_block(block_);
    if (counted_) account_->add(bytes_);
  }
  ~CpuMemory() override {
    account_->free_block(data_, block_);
    if (counted_) account_->remove(bytes_);
  }
  void* data() noexcept override { return data_; }
  std::size_t bytes() const noexcept override { return bytes_; }

 private:
  void* data_;
  std::size_t bytes_;
  std::size_t block_;
  bool counted_;
  std::shared_ptr<DeviceAccount> account_;
};

// One device's hold on memory the members of an all-reduce share, counted on that device.
class CpuShare final : public DeviceMemory {
 public:
  CpuShare(IntrusivePtr<DeviceMemory> shared, std::shared_ptr<DeviceAccount> account)
      : shared_(std::move(shared)), account_(std::move(account)) {
    account_->add(shared_->bytes());
  }
  ~CpuShare() override { account_->remove(shared_->bytes()); }
  void* data() noexcept override { return shared_->data(); }
  std::size_t bytes() const noexcept override { return shared_->bytes(); }
  bool exclusive() const noexcept override { return use_count() == 1 && shared_->use_count() == 1; }

 private:
  IntrusivePtr<DeviceMemory> shared_;
  std::shared_ptr<DeviceAccount> account_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int devices, const CpuBackendOptions& options) {
    if (devices < 1) throw std::invalid_argument("the CPU backend needs at least one device");
    const auto cache_limit = static_cast<std::size_t>(std::max<int64_t>(0, options.block_cache_mb))
                             << 20;
    for (int i = 0; i < devices; ++i) {
      accounts_.push_back(std::make_shared<DeviceAccount>(cache_limit));
    }
    const int threads =
        cpu::intra_op_threads(devices, options.intra_op_threads, options.host_processes);
    for (int i = 0; i < devices; ++i) pools_.push_back(std::make_unique<cpu::ComputePool>(threads));
  }

  std::string_view hardware() const noexcept override { return "CPU"; }
  int device_count() const noexcept override { return static_cast<int>(accounts_.size()); }

  IntrusivePtr<DeviceMemory> allocate(int device, std::size_t bytes) override {
    return IntrusivePtr<DeviceMemory>(new CpuMemory(bytes, account(device)));
  }
  IntrusivePtr<DeviceMemory> allocate_shared(int device, std::size_t bytes) override {
    return IntrusivePtr<DeviceMemory>(new CpuMemory(bytes, account(device), /*counted=*/false));
  }
  IntrusivePtr<DeviceMemory> share(int device, IntrusivePtr<DeviceMemory> shared) override {
    return IntrusivePtr<DeviceMemory>(new CpuShare(std::move(shared), account(device)));
  }

  void copy_to_device(int device, const void* host, DeviceMemory& dst, std::size_t bytes) override {
    check_size(dst, bytes, "copy_to_device");
    if (bytes) std::memcpy(dst.data(), host, bytes);
  }

  void copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) override {
    check_size(src, bytes, "copy_to_host");
    if (bytes) std::memcpy(host, src.data(), bytes);
  }

  std::unique_ptr<ProgramRun> start(int device, const Executable& program,
                                    std::vector<IntrusivePtr<DeviceMemory>> inputs) override;

  void collective(int device, const KernelCall& call, const BufferDesc& operand,
                  const BufferDesc& result, std::span<DeviceMemory* const> operands, int position,
                  DeviceMemory& output) override {
    (void)device;
    cpu::run_collective(call, operand, result, operands, position, output);
  }

  /// The compute threads of `device`, which its kernels share.
  [[nodiscard]] cpu::ComputePool& pool(int device) const { return *pools_.at(device); }

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

// One program's run: its slots, the pool of buffers it released, and the next call.
class CpuProgramRun final : public ProgramRun {
 public:
  CpuProgramRun(CpuBackend& backend, int device, const Executable& program,
                std::vector<IntrusivePtr<DeviceMemory>> inputs)
      : backend_(backend),
        device_(device),
        program_(program),
        planned_(!program.plan.empty()),
        slots_(program.slots.size()),
        is_output_(program.slots.size(), false) {
    if (inputs.size() != program.input_slots.size()) {
      throw std::invalid_argument(fmt::format("program takes {} inputs, got {}",
                                              program.input_slots.size(), inputs.size()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const BufferDesc& desc = program.slots[program.input_slots[i]];
      if (inputs[i]->bytes() != desc.bytes()) {
        throw std::invalid_argument(fmt::format(
            "input {} holds {} bytes; the program expects {}{} ({} bytes)", i, inputs[i]->bytes(),
            dtype_name(desc.dtype), desc.shape.to_string(), desc.bytes()));
      }
      if (program.donated(i) && !inputs[i]->exclusive()) {
        IntrusivePtr<DeviceMemory> copy = backend.allocate(device, desc.bytes());
        std::memcpy(copy->data(), inputs[i]->data(), desc.bytes());
        inputs[i] = std::move(copy);
        AXLE_COUNTER_INC("DonatedInputCopies", 1);
      }
      slots_[program.input_slots[i]] = std::move(inputs[i]);
    }
    const MemoryPlan& plan = program.plan;
    if (planned_ && (plan.release_begin.size() != program.calls.size() + 1 ||
                     plan.in_place.size() != program.calls.size())) {
      throw std::invalid_argument("the program's memory plan does not match its calls");
    }
    for (int32_t s : program.output_slots) is_output_.at(s) = true;
  }

  const KernelCall* advance() override {
    const cpu::KernelTable& table = cpu::kernel_table();
    const MemoryPlan& plan = program_.plan;
    for (; next_ < program_.calls.size(); ++next_) {
      const std::size_t c = next_;
      const KernelCall& call = program_.calls[c];
      if (is_collective(call.kernel)) {
        if (!stopped_) {
          stopped_ = true;
          return &call;
        }
        stopped_ = false;  // finish_collective filled its output
        release_after(c);
        continue;
      }
      const std::size_t bytes = program_.slots[call.output].bytes();
      if (shares_operand(call, bytes)) {
        slots_[call.output] = slots_[call.inputs[0]];
        release_after(c);
        continue;
      }
      views_.clear();
      for (int32_t in : call.inputs) views_.push_back({slots_[in]->data(), &program_.slots[in]});
      IntrusivePtr<DeviceMemory>& out = slots_[call.output];
      // A buffer another member of a collective still reads (or shares as its result) is never
      // written over: it is taken in place or pooled only while this run holds it alone.
      // (A collective's result may be a larger buffer than its slot: only an exact fit is taken.)
      if (planned_ && plan.in_place[c] >= 0 && slots_[plan.in_place[c]]->exclusive() &&
          slots_[plan.in_place[c]]->bytes() == bytes) {
        out = std::move(slots_[plan.in_place[c]]);  // the kernel writes over its dying operand
      } else if (IntrusivePtr<DeviceMemory> pooled = take_pooled(call.output)) {
        out = std::move(pooled);
      } else {
        out = backend_.allocate(device_, bytes);
      }
      cpu::KernelFn fn = table[static_cast<std::size_t>(call.kernel)];
      if (!fn) {
        throw std::logic_error(
            fmt::format("the CPU backend has no kernel for {}", describe_call(program_, call)));
      }
      try {
        fn(cpu::KernelArgs{
            call, views_, {out->data(), &program_.slots[call.output]}, backend_.pool(device_)});
      } catch (const std::exception& e) {
        throw std::runtime_error(
            fmt::format("kernel {} failed: {}", describe_call(program_, call), e.what()));
      }
      release_after(c);
    }
    return nullptr;
  }

  const IntrusivePtr<DeviceMemory>& collective_operand() const override {
    return slots_.at(program_.calls.at(next_).inputs.at(0));
  }

  IntrusivePtr<DeviceMemory> collective_result_buffer() override {
    return take_pooled(program_.calls.at(next_).output);
  }

  void finish_collective(IntrusivePtr<DeviceMemory> result) override {
    const KernelCall& call = program_.calls.at(next_);
    if (!stopped_ || !result || result->bytes() < program_.slots[call.output].bytes()) {
      throw std::logic_error(fmt::format("{}: no collective result of the output's size to finish",
                                         describe_call(program_, call)));
    }
    const std::size_t bytes = program_.slots[call.output].bytes();
    if (result->bytes() != bytes && is_output_[call.output]) {
      // A result shared among the members is larger than this member's share: the caller gets
      // a buffer of the output's own size.
      IntrusivePtr<DeviceMemory> exact = backend_.allocate(device_, bytes);
      std::memcpy(exact->data(), result->data(), bytes);
      result = std::move(exact);
    }
    slots_[call.output] = std::move(result);
  }

  std::vector<IntrusivePtr<DeviceMemory>> take_outputs() override {
    std::vector<IntrusivePtr<DeviceMemory>> outputs;
    outputs.reserve(program_.output_slots.size());
    for (int32_t slot : program_.output_slots) outputs.push_back(slots_[slot]);
    return outputs;
  }

 private:
  // A released buffer for `slot`, by the plan's rule (actors/compiler/memory_plan.cpp), or null: an
  // output takes one of its exact size, anything else the smallest one large enough if it is at
  // most twice as large (a small slot taking a large buffer would leave the next large slot to
  // allocate another).
  // Whether `call` is a reshape (a copy of one operand's bytes) whose result can be that operand's
  // buffer itself, held by both slots: nothing writes over a buffer two slots hold (writing in
  // place and pooling need it held alone), so the copy would only cost time and memory. Not
  // for an all-reduce's shared result, nor for a program output the buffer does not fit exactly.
  bool shares_operand(const KernelCall& call, std::size_t bytes) const {
    if (call.kernel != Kernel::kCopy || call.inputs.size() != 1) return false;
    const IntrusivePtr<DeviceMemory>& in = slots_[call.inputs[0]];
    return in && program_.slots[call.inputs[0]].bytes() == bytes &&
           program_.slots[call.inputs[0]].dtype == program_.slots[call.output].dtype &&
           (!is_output_[call.output] || in->bytes() == bytes) &&
           dynamic_cast<const CpuShare*>(in.get()) == nullptr;
  }

  IntrusivePtr<DeviceMemory> take_pooled(int32_t slot) {
    if (!planned_) return {};
    const std::size_t bytes = program_.slots[slot].bytes();
    auto it = is_output_[slot] ? pool_.find(bytes) : pool_.lower_bound(bytes);
    if (it == pool_.end() || it->first > 2 * bytes) return {};
    IntrusivePtr<DeviceMemory> buffer = std::move(it->second);
    pool_.erase(it);
    return buffer;
  }

  void release_after(std::size_t c) {
    if (!planned_) return;
    const MemoryPlan& plan = program_.plan;
    for (uint32_t r = plan.release_begin[c]; r < plan.release_begin[c + 1]; ++r) {
      IntrusivePtr<DeviceMemory> released = std::move(slots_.at(plan.release_slots[r]));
      // Pooled only when nothing else holds it (a slot written in place shares it). A share of
      // an all-reduce's result goes at once, as the plan counts it (the memory is the other
      // members' until the last lets go).
      if (released && released->use_count() == 1 &&
          dynamic_cast<const CpuShare*>(released.get()) == nullptr) {
        const std::size_t size = released->bytes();
        pool_.emplace(size, std::move(released));
      }
    }
  }

  CpuBackend& backend_;
  const int device_;
  const Executable& program_;
  const bool planned_;
  std::vector<IntrusivePtr<DeviceMemory>> slots_;
  std::vector<bool> is_output_;
  // Released buffers by size, for later slots (freed when the run ends): an output takes one of
  // its exact size, anything else the smallest one large enough if it is at most twice as large
  // (a small slot taking a large buffer would leave the next large slot to allocate another;
  // actors/compiler/memory_plan.cpp plans by the same rule).
  std::multimap<std::size_t, IntrusivePtr<DeviceMemory>> pool_;
  std::vector<cpu::ConstView> views_;
  std::size_t next_ = 0;
  bool stopped_ = false;  // advance() returned the collective at next_
};

std::unique_ptr<ProgramRun> CpuBackend::start(int device, const Executable& program,
                                              std::vector<IntrusivePtr<DeviceMemory>> inputs) {
  return std::make_unique<CpuProgramRun>(*this, device, program, std::move(inputs));
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int devices, CpuBackendOptions options) {
  cpu::set_cpu_isa(options.cpu_isa, "AXLE_CPU_ISA");
  return std::make_unique<CpuBackend>(devices, options);
}

namespace cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t{};
    register_elementwise_kernels(t);
    register_reduce_kernels(t);
    register_linalg_kernels(t);
    register_conv_kernels(t);
    register_pooling_kernels(t);
    register_data_movement_kernels(t);
    register_random_kernels(t);
    register_fused_kernels(t);
    register_scatter_kernels(t);
    register_scan_kernels(t);
    register_topk_kernels(t);
    register_attention_kernels(t);
    register_gelu_backward_kernel(t);
    register_layer_norm_kernels(t);
    register_conv_transpose_kernel(t);
    return t;
  }();
  return table;
}

}  // namespace cpu
}  // namespace axle
