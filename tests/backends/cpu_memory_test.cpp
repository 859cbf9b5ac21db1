// CPU device memory: accounting, blocks of 4 KiB and more kept for reuse when freed, and donated
// inputs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "axle/backends/backend.h"
#include "axle/engine/metrics.h"

namespace axle {
namespace {

TEST(CpuMemory, LargeBlocksAreReusedAndNotCountedWhileCached) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  constexpr std::size_t kBytes = 8 << 20;
  void* first = nullptr;
  {
    IntrusivePtr<DeviceMemory> a = backend->allocate(0, kBytes);
    first = a->data();
    EXPECT_EQ(backend->memory_info(0).bytes_in_use, kBytes);
  }
  EXPECT_EQ(backend->memory_info(0).bytes_in_use, 0u);
  IntrusivePtr<DeviceMemory> b = backend->allocate(0, kBytes);
  EXPECT_EQ(b->data(), first);  // the same block, already faulted in
  EXPECT_EQ(b->bytes(), kBytes);
  IntrusivePtr<DeviceMemory> c = backend->allocate(0, kBytes);
  EXPECT_NE(c->data(), b->data());  // a block is handed out once
  EXPECT_EQ(backend->memory_info(0).peak_bytes, 2 * kBytes);
}

// A training step's activations (here f32[64, 512], 128 KiB) are freed and asked for again every
// step: kept too, they never go back to malloc, whose heaps a long run would otherwise fragment.
TEST(CpuMemory, ActivationSizedBlocksAreReusedToo) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  constexpr std::size_t kBytes = 64 * 512 * sizeof(float);
  void* first = nullptr;
  {
    IntrusivePtr<DeviceMemory> a = backend->allocate(0, kBytes);
    first = a->data();
  }
  // A block given back to malloc would be what this asks for next.
  void* meanwhile = std::malloc(kBytes + 64);
  IntrusivePtr<DeviceMemory> b = backend->allocate(0, kBytes);
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(b->bytes(), kBytes);
  EXPECT_EQ(backend->memory_info(0).bytes_in_use, kBytes);
  std::free(meanwhile);
}

// A small layer's gradient or a combined all-reduce's part (here 16 KiB) comes back every step
// too; of two blocks of a size, the one freed last, the likelier in the caches, is handed out
// first. Blocks under 4 KiB go back to malloc.
TEST(CpuMemory, SmallBlocksAreReusedLastFreedFirst) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  constexpr std::size_t kBytes = 16 << 10;
  void* freed_first = nullptr;
  void* freed_last = nullptr;
  {
    IntrusivePtr<DeviceMemory> a = backend->allocate(0, kBytes);
    IntrusivePtr<DeviceMemory> b = backend->allocate(0, kBytes);
    freed_first = a->data();
    freed_last = b->data();
    a = IntrusivePtr<DeviceMemory>();
    b = IntrusivePtr<DeviceMemory>();
  }
  EXPECT_EQ(backend->memory_info(0).bytes_in_use, 0u);
  void* meanwhile = std::malloc(kBytes + 64);  // what malloc would hand out next
  IntrusivePtr<DeviceMemory> c = backend->allocate(0, kBytes);
  IntrusivePtr<DeviceMemory> d = backend->allocate(0, kBytes);
  EXPECT_EQ(c->data(), freed_last);
  EXPECT_EQ(d->data(), freed_first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % 64, 0u);
  EXPECT_EQ(backend->memory_info(0).bytes_in_use, 2 * kBytes);
  std::free(meanwhile);
  // A different size is not handed one of these.
  IntrusivePtr<DeviceMemory> e = backend->allocate(0, 8 << 10);
  EXPECT_NE(e->data(), c->data());
  EXPECT_NE(e->data(), d->data());
}

// y = x + x over f32[4], written in place over x, which the caller donates.
IntrusivePtr<Executable> add_in_place_over_donated_input() {
  auto made = make_intrusive<Executable>();
  Executable& program = *made;
  program.slots = {{DType::kFloat32, Shape{4}}, {DType::kFloat32, Shape{4}}};
  program.input_slots = {0};
  program.output_slots = {1};
  program.calls = {{Kernel::kAdd, {0, 0}, 1, {}, {}}};
  program.donated_inputs = {1};
  program.plan.release_begin = {0, 0};
  program.plan.in_place = {0};
  return made;
}

IntrusivePtr<DeviceMemory> floats(Backend& backend, const std::vector<float>& values) {
  IntrusivePtr<DeviceMemory> memory = backend.allocate(0, values.size() * sizeof(float));
  backend.copy_to_device(0, values.data(), *memory, values.size() * sizeof(float));
  return memory;
}

std::vector<float> values_of(Backend& backend, DeviceMemory& memory) {
  std::vector<float> values(memory.bytes() / sizeof(float));
  backend.copy_to_host(0, memory, values.data(), memory.bytes());
  return values;
}

TEST(CpuMemory, ADonatedInputIsWrittenOver) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  const IntrusivePtr<Executable> program = add_in_place_over_donated_input();
  ASSERT_EQ(program_error(*program), "");
  IntrusivePtr<DeviceMemory> x = floats(*backend, {1, 2, 3, 4});
  const void* address = x->data();
  std::vector<IntrusivePtr<DeviceMemory>> inputs;
  inputs.push_back(std::move(x));
  const std::vector<IntrusivePtr<DeviceMemory>> out =
      backend->execute(0, *program, std::move(inputs));
  EXPECT_EQ(out[0]->data(), address);
  EXPECT_EQ(values_of(*backend, *out[0]), (std::vector<float>{2, 4, 6, 8}));
}

TEST(CpuMemory, ADonatedInputHeldElsewhereIsCopiedFirst) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  clear_all();
  const IntrusivePtr<DeviceMemory> x = floats(*backend, {1, 2, 3, 4});
  const std::vector<IntrusivePtr<DeviceMemory>> out =
      backend->execute(0, *add_in_place_over_donated_input(), {x});
  EXPECT_NE(out[0]->data(), x->data());
  EXPECT_EQ(values_of(*backend, *out[0]), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(values_of(*backend, *x), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(counter_value("DonatedInputCopies").value_or(0), 1);
}

// r = reshape(x) to f32[2, 2], then y = x + x planned in place over x (donated).
IntrusivePtr<Executable> reshape_then_add_over_donated_input() {
  auto made = make_intrusive<Executable>();
  Executable& program = *made;
  program.slots = {
      {DType::kFloat32, Shape{4}}, {DType::kFloat32, Shape{2, 2}}, {DType::kFloat32, Shape{4}}};
  program.input_slots = {0};
  program.output_slots = {1, 2};
  program.calls = {{Kernel::kCopy, {0}, 1, {}, {}}, {Kernel::kAdd, {0, 0}, 2, {}, {}}};
  program.donated_inputs = {1};
  program.plan.release_begin = {0, 0, 0};
  program.plan.in_place = {-1, 0};
  return made;
}

TEST(CpuMemory, AReshapeSharesItsOperandsBufferWhichIsThenNotWrittenOver) {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  const IntrusivePtr<Executable> program = reshape_then_add_over_donated_input();
  ASSERT_EQ(program_error(*program), "");
  IntrusivePtr<DeviceMemory> x = floats(*backend, {1, 2, 3, 4});
  const void* address = x->data();
  std::vector<IntrusivePtr<DeviceMemory>> inputs;
  inputs.push_back(std::move(x));
  const std::vector<IntrusivePtr<DeviceMemory>> out =
      backend->execute(0, *program, std::move(inputs));
  EXPECT_EQ(out[0]->data(), address);  // no copy
  EXPECT_NE(out[1]->data(), address);  // the reshape still holds x: y went elsewhere
  EXPECT_EQ(values_of(*backend, *out[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values_of(*backend, *out[1]), (std::vector<float>{2, 4, 6, 8}));
}

TEST(CpuMemory, DonationFlagsMustMatchTheInputs) {
  const IntrusivePtr<Executable> program = add_in_place_over_donated_input();
  program->donated_inputs = {1, 0};
  EXPECT_NE(program_error(*program).find("2 donation flags for 1 inputs"), std::string::npos);
  program->donated_inputs = {};  // x is the caller's again: writing over it is refused
  EXPECT_NE(program_error(*program).find("cannot write in place over slot 0"), std::string::npos);
}

}  // namespace
}  // namespace axle
