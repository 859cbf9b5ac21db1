// backends/testing/testing_backend.h: the backend tests drive — it counts calls per device and
// kind, holds executions until released, and fails a chosen kernel or allocation. Programs are
// built by hand in the Executable format (backends/executable.h) and run on the CPU backend it
// wraps.
#include "axle/backends/testing/testing_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace axle {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<TestingBackend> make_backend(int devices = 1) {
  return std::make_unique<TestingBackend>(make_cpu_backend(devices));
}

IntrusivePtr<DeviceMemory> upload(Backend& backend, int device, const std::vector<float>& values) {
  IntrusivePtr<DeviceMemory> memory = backend.allocate(device, values.size() * sizeof(float));
  backend.copy_to_device(device, values.data(), *memory, values.size() * sizeof(float));
  return memory;
}

std::vector<float> download(Backend& backend, int device, DeviceMemory& memory) {
  std::vector<float> values(memory.bytes() / sizeof(float));
  backend.copy_to_host(device, memory, values.data(), memory.bytes());
  return values;
}

// out = exp(a + b) over f32[2].
IntrusivePtr<Executable> add_then_exp() {
  auto program = make_intrusive<Executable>();
  program->slots.assign(4, BufferDesc{DType::kFloat32, Shape{2}});
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kAdd, {0, 1}, 2, {}, {}}, {Kernel::kExp, {2}, 3, {}, {}}};
  program->output_slots = {3};
  return program;
}

constexpr int64_t kFirstFill = 1 << 18;  // 1 MiB of f32
constexpr int64_t kLastFill = 1 << 20;   // 4 MiB of f32
constexpr std::size_t kFirstFillBytes = kFirstFill * sizeof(float);
constexpr std::size_t kLastFillBytes = kLastFill * sizeof(float);

// Fills 1 MiB with 7, multiplies a (f32[2,3]) by b (f32[3,4]), then fills 4 MiB with 9; outputs
// the first fill, the product and the last fill.
IntrusivePtr<Executable> fill_matmul_fill() {
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2, 3}},
                    {DType::kFloat32, Shape{3, 4}},
                    {DType::kFloat32, Shape{kFirstFill}},
                    {DType::kFloat32, Shape{2, 4}},
                    {DType::kFloat32, Shape{kLastFill}}};
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kFill, {}, 2, {}, {7.0}},
                    {Kernel::kMatmul, {0, 1}, 3, {0, 0}, {}},
                    {Kernel::kFill, {}, 4, {}, {9.0}}};
  program->output_slots = {2, 3, 4};
  return program;
}

const std::vector<float> kA = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {1, 0, -1, 2, 0.5f, 1, 0, -2, 3, 1, 2, 0};

// a @ b by plain loops.
std::vector<float> reference_product() {
  std::vector<float> out(8, 0.0f);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 3; ++k) out[i * 4 + j] += kA[i * 3 + k] * kB[k * 4 + j];
    }
  }
  return out;
}

std::vector<IntrusivePtr<DeviceMemory>> matmul_inputs(Backend& backend, int device) {
  return {upload(backend, device, kA), upload(backend, device, kB)};
}

// The message of what `fn` throws as a std::runtime_error ("" when it throws nothing).
template <class F>
std::string failure_of(F&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(TestingBackend, CountsEachDevicesCallsByKind) {
  auto backend = make_backend(2);
  IntrusivePtr<Executable> program = add_then_exp();
  auto a = upload(*backend, 0, {0, 1});
  auto b = upload(*backend, 0, {1, 1});
  auto out = backend->execute(0, *program, {a, b});
  (void)download(*backend, 0, *out[0]);
  (void)backend->memory_info(1);
  (void)backend->memory_info(1);
  auto x = upload(*backend, 1, {2, 3});
  auto sum = backend->allocate(1, 2 * sizeof(float));
  const KernelCall all_reduce{Kernel::kAllReduce, {0}, 1, {0, 1, 1}, {1.0}};
  const BufferDesc desc{DType::kFloat32, Shape{2}};
  DeviceMemory* operands[] = {x.get()};
  backend->collective(1, all_reduce, desc, desc, operands, 0, *sum);
  EXPECT_EQ(download(*backend, 1, *sum), (std::vector<float>{2, 3}));

  const TestingBackend::Calls zero = backend->calls(0);
  EXPECT_EQ(zero.allocate, 2);
  EXPECT_EQ(zero.copy_to_device, 2);
  EXPECT_EQ(zero.copy_to_host, 1);
  EXPECT_EQ(zero.start, 1);
  EXPECT_EQ(zero.collective, 0);
  EXPECT_EQ(zero.memory_info, 0);
  EXPECT_EQ(zero.threads, 1);
  const TestingBackend::Calls one = backend->calls(1);
  EXPECT_EQ(one.allocate, 2);
  EXPECT_EQ(one.copy_to_device, 1);
  EXPECT_EQ(one.copy_to_host, 1);
  EXPECT_EQ(one.start, 0);
  EXPECT_EQ(one.collective, 1);
  EXPECT_EQ(one.memory_info, 2);
  EXPECT_EQ(one.threads, 1);
}

TEST(TestingBackend, CountsTheDistinctThreadsEachDevicesCallsCameFrom) {
  auto backend = make_backend(2);
  (void)backend->memory_info(0);
  std::thread other([&] {
    (void)backend->memory_info(0);
    (void)backend->allocate(1, 4);
  });
  other.join();
  (void)backend->memory_info(0);
  EXPECT_EQ(backend->calls(0).threads, 2);
  EXPECT_EQ(backend->calls(0).memory_info, 3);
  EXPECT_EQ(backend->calls(1).threads, 1);
}

TEST(TestingBackend, AHeldExecutionWaitsUntilReleased) {
  auto backend = make_backend();
  IntrusivePtr<Executable> program = add_then_exp();
  auto a = upload(*backend, 0, {0, 1});
  auto b = upload(*backend, 0, {0, 1});
  backend->hold();
  auto running = std::async(std::launch::async, [&] {
    return backend->execute(0, *program, {a, b});
  });
  ASSERT_TRUE(backend->wait_until_held(1, 30s));
  EXPECT_EQ(backend->held_count(), 1);
  EXPECT_FALSE(backend->wait_until_held(2, 20ms));  // only one is held
  EXPECT_EQ(running.wait_for(50ms), std::future_status::timeout);
  backend->release();
  ASSERT_EQ(running.wait_for(30s), std::future_status::ready);
  auto out = running.get();
  const std::vector<float> values = download(*backend, 0, *out[0]);
  EXPECT_FLOAT_EQ(values[0], 1.0f);
  EXPECT_FLOAT_EQ(values[1], std::exp(2.0f));
  // Released: executions after it run straight through.
  out = backend->execute(0, *program, {a, b});
  EXPECT_EQ(backend->held_count(), 1);
}

TEST(TestingBackend, AHeldRunSaysItWaitsAndResumesOnRelease) {
  auto backend = make_backend();
  IntrusivePtr<Executable> program = add_then_exp();
  auto before =
      backend->start(0, *program, {upload(*backend, 0, {1, 1}), upload(*backend, 0, {1, 1})});
  backend->hold();
  auto held =
      backend->start(0, *program, {upload(*backend, 0, {0, 0}), upload(*backend, 0, {0, 0})});
  EXPECT_EQ(held->advance(), ProgramRun::waiting());
  EXPECT_EQ(backend->held_count(), 1);
  std::atomic<int> resumed{0};
  held->when_resumable([&] { ++resumed; });
  // A run started before the hold goes on.
  EXPECT_EQ(before->advance(), nullptr);
  EXPECT_FLOAT_EQ(download(*backend, 0, *before->take_outputs()[0])[0], std::exp(2.0f));
  EXPECT_EQ(resumed, 0);
  backend->release();
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(held->advance(), nullptr);
  EXPECT_EQ(download(*backend, 0, *held->take_outputs()[0]), (std::vector<float>{1, 1}));
}

TEST(TestingBackend, ARunReleasedIsNotHeldAgainByTheNextHold) {
  auto backend = make_backend();
  IntrusivePtr<Executable> program = add_then_exp();
  backend->hold();
  auto run =
      backend->start(0, *program, {upload(*backend, 0, {0, 0}), upload(*backend, 0, {0, 0})});
  ASSERT_EQ(run->advance(), ProgramRun::waiting());
  std::atomic<int> resumed{0};
  run->when_resumable([&] { ++resumed; });
  backend->release();
  ASSERT_EQ(resumed, 1);
  // The test holds the next step before the released run got round to advancing (as a device
  // actor may be slow to take its resume message): that run's hold is over all the same.
  backend->hold();
  EXPECT_EQ(run->advance(), nullptr) << "a released run was held again by a later hold()";
  backend->release();
}

TEST(TestingBackend, AFailingKernelRunsTheCallsBeforeItAndNoneAfter) {
  auto backend = make_backend();
  IntrusivePtr<Executable> program = fill_matmul_fill();
  backend->fail_kernel(Kernel::kMatmul);
  const std::string error =
      failure_of([&] { (void)backend->execute(0, *program, matmul_inputs(*backend, 0)); });
  EXPECT_NE(error.find("kernel matmul(f32[2,3], f32[3,4]) -> f32[2,4] failed"), std::string::npos)
      << error;
  // The first fill ran (its megabyte was allocated); the last one did not.
  const MemoryInfo memory = backend->memory_info(0);
  EXPECT_GE(memory.peak_bytes, kFirstFillBytes);
  EXPECT_LT(memory.peak_bytes, kLastFillBytes);
}

TEST(TestingBackend, AFailingKernelFailsOnlyAfterTheCallsBeforeItRan) {
  // fill -> all_reduce (where the run stops, so the fill's output can be seen) -> matmul.
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2, 3}},
                    {DType::kFloat32, Shape{3, 4}},
                    {DType::kFloat32, Shape{4}},
                    {DType::kFloat32, Shape{4}},
                    {DType::kFloat32, Shape{2, 4}}};
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kFill, {}, 2, {}, {5.0}},
                    {Kernel::kAllReduce, {2}, 3, {0, 1, 0}, {1.0}},
                    {Kernel::kMatmul, {0, 1}, 4, {0, 0}, {}}};
  program->output_slots = {3, 4};
  auto backend = make_backend();
  backend->fail_kernel(Kernel::kMatmul);
  auto run = backend->start(0, *program, matmul_inputs(*backend, 0));
  const KernelCall* call = run->advance();
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(call->kernel, Kernel::kAllReduce);
  EXPECT_EQ(download(*backend, 0, *run->collective_operand()), (std::vector<float>{5, 5, 5, 5}));
  run->finish_collective(upload(*backend, 0, {5, 5, 5, 5}));
  const std::string error = failure_of([&] { (void)run->advance(); });
  EXPECT_NE(error.find("kernel matmul(f32[2,3], f32[3,4]) -> f32[2,4] failed"), std::string::npos)
      << error;
}

TEST(TestingBackend, FailsTheNextProgramsCallingTheKernelThenRunsThemNormally) {
  auto backend = make_backend(2);
  IntrusivePtr<Executable> program = fill_matmul_fill();
  backend->fail_kernel(Kernel::kMatmul, 2);
  // A program without a matmul is not one of them.
  auto out = backend->execute(0, *add_then_exp(),
                              {upload(*backend, 0, {0, 0}), upload(*backend, 0, {0, 0})});
  EXPECT_EQ(download(*backend, 0, *out[0]), (std::vector<float>{1, 1}));
  EXPECT_NE(failure_of([&] { (void)backend->execute(0, *program, matmul_inputs(*backend, 0)); }),
            "");
  // On any device.
  EXPECT_NE(failure_of([&] { (void)backend->execute(1, *program, matmul_inputs(*backend, 1)); }),
            "");
  out = backend->execute(0, *program, matmul_inputs(*backend, 0));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(download(*backend, 0, *out[1]), reference_product());
  const std::vector<float> first = download(*backend, 0, *out[0]);
  const std::vector<float> last = download(*backend, 0, *out[2]);
  EXPECT_EQ(std::count(first.begin(), first.end(), 7.0f), kFirstFill);
  EXPECT_EQ(std::count(last.begin(), last.end(), 9.0f), kLastFill);
}

TEST(TestingBackend, AHeldRunThatIsToFailFailsOnceReleased) {
  auto backend = make_backend();
  IntrusivePtr<Executable> program = fill_matmul_fill();
  backend->fail_kernel(Kernel::kMatmul);
  backend->hold();
  auto running = std::async(std::launch::async, [&] {
    return failure_of([&] { (void)backend->execute(0, *program, matmul_inputs(*backend, 0)); });
  });
  ASSERT_TRUE(backend->wait_until_held(1, 30s));
  EXPECT_LT(backend->memory_info(0).peak_bytes, kFirstFillBytes);  // held before its first call
  backend->release();
  ASSERT_EQ(running.wait_for(30s), std::future_status::ready);
  EXPECT_NE(running.get().find("kernel matmul"), std::string::npos);
  EXPECT_GE(backend->memory_info(0).peak_bytes, kFirstFillBytes);
}

TEST(TestingBackend, FailsTheNextAllocationsThenAllocatesAgain) {
  auto backend = make_backend(2);
  backend->fail_allocations(2);
  EXPECT_THROW((void)backend->allocate(0, 64), std::bad_alloc);
  EXPECT_THROW((void)backend->allocate(1, 64), std::bad_alloc);
  IntrusivePtr<DeviceMemory> memory = backend->allocate(0, 64);
  ASSERT_TRUE(memory);
  EXPECT_EQ(memory->bytes(), 64u);
  EXPECT_EQ(backend->calls(0).allocate, 2);  // failed ones count too
  EXPECT_EQ(backend->calls(1).allocate, 1);
  EXPECT_EQ(backend->memory_info(0).bytes_in_use, 64u);
}

}  // namespace
}  // namespace axle
