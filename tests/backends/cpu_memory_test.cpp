// CPU device memory: accounting, and large blocks kept for reuse when freed.
#include <gtest/gtest.h>

#include "backends/backend.h"

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

}  // namespace
}  // namespace axle
