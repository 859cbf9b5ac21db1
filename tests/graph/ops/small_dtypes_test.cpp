// Tests the storage-only dtypes f16, s8, u8 and s16 by value against PyTorch: conversions,
// arithmetic, promotion and scalars compared bit for bit with what PyTorch 1.13 computed
// (tests/graph/ops/torch/small_dtypes.safetensors, written by small_dtypes.py beside it), and the
// ops that move, select and reduce them checked against plain loops. Runs on both runtimes
// (tests/graph/test_runtime.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "axle/engine/element.h"
#include "axle/graph/formats/safetensors.h"
#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

const CpuTensorMap& torch_file() {
  static const CpuTensorMap tensors =
      load_safetensors(std::filesystem::path(AXLE_TORCH_FILES) / "small_dtypes.safetensors");
  return tensors;
}

const CpuTensor& from_torch(const std::string& name) {
  const auto at = torch_file().find(name);
  if (at == torch_file().end()) throw std::out_of_range("no tensor " + name + " in the file");
  return at->second;
}

Tensor on_device(const std::string& name) { return tensor_from_host(from_torch(name)); }

// The elements in reverse order (PyTorch's x.flip(0) of a 1-d tensor).
Tensor flipped(const std::string& name) {
  CpuTensor host = from_torch(name);
  const std::size_t size = dtype_size(host.dtype);
  const std::size_t n = host.bytes.size() / size;
  for (std::size_t i = 0; i < n / 2; ++i) {
    std::swap_ranges(host.bytes.begin() + static_cast<std::ptrdiff_t>(i * size),
                     host.bytes.begin() + static_cast<std::ptrdiff_t>((i + 1) * size),
                     host.bytes.begin() + static_cast<std::ptrdiff_t>((n - 1 - i) * size));
  }
  return tensor_from_host(std::move(host));
}

// Passes when `t` holds exactly PyTorch's `name`: dtype, shape and every byte.
::testing::AssertionResult same_as_torch(const Tensor& t, const std::string& name) {
  const CpuTensor& want = from_torch(name);
  const CpuTensor got = t.cpu();
  if (got.dtype != want.dtype || !(got.shape == want.shape)) {
    return ::testing::AssertionFailure()
           << name << ": got " << dtype_name(got.dtype) << got.shape.to_string() << ", PyTorch "
           << dtype_name(want.dtype) << want.shape.to_string();
  }
  const std::size_t size = dtype_size(want.dtype);
  int bad = 0;
  std::string detail;
  for (std::size_t i = 0; i * size < want.bytes.size(); ++i) {
    if (std::memcmp(got.bytes.data() + i * size, want.bytes.data() + i * size, size) == 0) continue;
    if (++bad <= 5) {
      detail += "\n  element " + std::to_string(i) + ": got " +
                std::to_string(load_element(got.dtype, got.bytes.data() + i * size)) +
                ", PyTorch " +
                std::to_string(load_element(want.dtype, want.bytes.data() + i * size));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << name << ": " << bad << " elements differ" << detail;
}

class SmallDtypes : public OpsValue {};

TEST_F(SmallDtypes, TheFileHoldsEachDtypeUnderItsSafetensorsName) {
  EXPECT_EQ(from_torch("f16_all_bits").dtype, kHalf);
  EXPECT_EQ(from_torch("s8_all").dtype, kChar);
  EXPECT_EQ(from_torch("u8_all").dtype, kByte);
  EXPECT_EQ(from_torch("s16_values").dtype, kShort);
  const std::vector<uint8_t> u8 = from_torch("u8_all").values<uint8_t>();
  ASSERT_EQ(u8.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(u8[i], i);
  const std::vector<int8_t> s8 = from_torch("s8_all").values<int8_t>();
  for (int i = 0; i < 256; ++i) EXPECT_EQ(s8[i], i - 128);
  const std::vector<Half> f16 = from_torch("f16_all_bits").values<Half>();
  for (int i = 0; i < 65536; ++i) EXPECT_EQ(f16[i].x, static_cast<uint16_t>(i - 32768));
}

// axle writes what it read as the same bytes, so PyTorch reads axle's file value for value
// (small_dtypes.py check FILE says so of a file axle writes).
TEST_F(SmallDtypes, SavedAgainTheFileHasTheBytesPyTorchWrote) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("axle_small_dtypes_" + std::to_string(::getpid()));
  save_safetensors(path, torch_file());
  std::ifstream ours(path, std::ios::binary);
  std::ifstream theirs(std::filesystem::path(AXLE_TORCH_FILES) / "small_dtypes.safetensors",
                       std::ios::binary);
  const std::string ours_bytes{std::istreambuf_iterator<char>(ours), {}};
  const std::string theirs_bytes{std::istreambuf_iterator<char>(theirs), {}};
  std::filesystem::remove(path);
  EXPECT_EQ(ours_bytes.size(), theirs_bytes.size());
  EXPECT_TRUE(ours_bytes == theirs_bytes);
}

TEST_F(SmallDtypes, EveryF16WidensToPyTorchsF32) {
  EXPECT_TRUE(same_as_torch(on_device("f16_all_bits").to(kFloat32), "f16_all_bits.to_f32"));
}

TEST_F(SmallDtypes, FloatsNarrowToF16S8AndU8AsPyTorchs) {
  EXPECT_TRUE(same_as_torch(on_device("f32_values").to(kHalf), "f32_values.to_f16"));
  EXPECT_TRUE(same_as_torch(on_device("f64_values").to(kHalf), "f64_values.to_f16"));
  EXPECT_TRUE(same_as_torch(on_device("f32_small").to(kInt8), "f32_small.to_s8"));
  EXPECT_TRUE(same_as_torch(on_device("f32_small").to(kUInt8), "f32_small.to_u8"));
}

TEST_F(SmallDtypes, IntegerArithmeticWrapsAndPromotesAsPyTorchs) {
  const Tensor u8 = on_device("u8_all");
  const Tensor s8 = on_device("s8_all");
  const Tensor s16 = on_device("s16_values");
  EXPECT_TRUE(same_as_torch(u8 + flipped("s8_all"), "u8_all.add_s8_all"));  // u8 + s8 is s16
  EXPECT_TRUE(same_as_torch(u8 * flipped("u8_all"), "u8_all.mul_u8_all"));
  EXPECT_TRUE(same_as_torch(s8 * flipped("s8_all"), "s8_all.mul_s8_all"));
  EXPECT_TRUE(same_as_torch(s16 * flipped("s16_values"), "s16_values.mul_s16_values"));
}

TEST_F(SmallDtypes, ScalarsPromoteAsPythonNumbersDo) {
  const Tensor u8 = on_device("u8_all");
  EXPECT_TRUE(same_as_torch(u8 + 300, "u8_all.add_300"));  // an integer keeps u8 and wraps
  EXPECT_TRUE(same_as_torch(u8 * 1.5, "u8_all.mul_1.5"));  // a float gives the default f32
  const Tensor h = on_device("f16_a");
  EXPECT_EQ((h * 2.5).dtype(), kHalf);  // a scalar never widens a floating tensor
  EXPECT_EQ((h + 3).dtype(), kHalf);
}

TEST_F(SmallDtypes, F16ArithmeticRoundsEachOpAsPyTorchs) {
  const Tensor a = on_device("f16_a");
  const Tensor b = on_device("f16_b");
  EXPECT_TRUE(same_as_torch(a * b + a, "f16_a.mul_f16_b.add_f16_a"));
  EXPECT_TRUE(same_as_torch(a / b, "f16_a.div_f16_b"));
  // Sums are taken in f32 and rounded once; the order of the f32 sum may differ from PyTorch's,
  // so one f16 step apart is allowed.
  for (const auto& [got, name] : {std::pair{sum(a), "f16_a.sum"}, {mean(a), "f16_a.mean"}}) {
    ASSERT_EQ(got.dtype(), kHalf) << name;
    const double want = load_element(kHalf, from_torch(name).bytes.data());
    EXPECT_NEAR(got.item(), want, std::abs(want) * 0x1p-10) << name;
  }
}

TEST_F(SmallDtypes, PromotionFollowsPyTorchsTable) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kHalf, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kHalf, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kInt64, kHalf), kHalf);
  EXPECT_EQ(promote_types(kBool, kUInt8), kUInt8);
  EXPECT_EQ(promote_types(kUInt8, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt8, kInt16), kInt16);
  EXPECT_EQ(promote_types(kUInt8, kInt16), kInt16);
  const Tensor h = full({2}, 1.5, kHalf);
  const Tensor bf = full({2}, 2.0, kBFloat16);
  EXPECT_EQ((h + bf).dtype(), kFloat32);
  EXPECT_EQ((full({2}, 3, kUInt8) + full({2}, -2, kInt8)).dtype(), kInt16);
  EXPECT_EQ(gt(h, 1.0).dtype(), kBool);
}

TEST_F(SmallDtypes, CreationHoldsEachValueInItsDtype) {
  EXPECT_TRUE(matches(full({3}, 0.1, kHalf), kHalf, constant_ref({3}, Half(0.1f)), kExact));
  EXPECT_TRUE(matches(full({2, 2}, -3, kInt8), kInt8, constant_ref({2, 2}, -3), kExact));
  EXPECT_TRUE(matches(full({2}, 200, kUInt8), kUInt8, constant_ref({2}, 200), kExact));
  EXPECT_TRUE(matches(zeros({4}, kInt16), kInt16, constant_ref({4}, 0), kExact));
  EXPECT_TRUE(matches(ones({4}, kHalf), kHalf, constant_ref({4}, 1), kExact));
  const std::vector<Half> halves = {Half(1.0f), Half(-2.5f), Half(65504.0f)};
  EXPECT_TRUE(matches(tensor(halves, {3}), kHalf, Ref{{3}, {1.0, -2.5, 65504.0}}, kExact));
  const std::vector<uint8_t> bytes = {0, 7, 255};
  EXPECT_EQ(tensor(bytes, {3}).cpu().values<uint8_t>(), bytes);
  EXPECT_EQ(tensor(bytes, {3}).dtype(), kUInt8);
  EXPECT_EQ(arange(0, 5).to(kInt8).cpu().values<int8_t>(), (std::vector<int8_t>{0, 1, 2, 3, 4}));
}

TEST_F(SmallDtypes, DataMovementKeepsEveryBit) {
  // f16 NaN payloads and signed zeros survive: these ops copy, they do not compute.
  const Tensor x = on_device("f16_all_bits").reshape({256, 256});
  const std::vector<Half> all = from_torch("f16_all_bits").values<Half>();
  const std::vector<Half> t = x.transpose(0, 1).cpu().values<Half>();
  const std::vector<Half> rows =
      index_select(x, 0, tensor(std::vector<int64_t>{255, 3}, {2})).cpu().values<Half>();
  const std::vector<Half> both =
      cat({slice(x, 0, 1, 2), slice(x, 0, 0, 1)}, 0).cpu().values<Half>();
  for (int i = 0; i < 256; ++i) {
    for (int j = 0; j < 256; ++j) ASSERT_EQ(t[i * 256 + j].x, all[j * 256 + i].x);
    EXPECT_EQ(rows[i].x, all[255 * 256 + i].x);
    EXPECT_EQ(rows[256 + i].x, all[3 * 256 + i].x);
    EXPECT_EQ(both[i].x, all[256 + i].x);
    EXPECT_EQ(both[256 + i].x, all[i].x);
  }
  const Tensor u8 = on_device("u8_all").reshape({16, 16});
  const Tensor picked = gather(u8, 1, full({16, 1}, int64_t{15}));
  const std::vector<uint8_t> last = picked.cpu().values<uint8_t>();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(last[i], i * 16 + 15);
}

TEST_F(SmallDtypes, SelectionComparisonAndReductionsComputeOnTheValues) {
  const Tensor u8 = on_device("u8_all");
  const Tensor s8 = on_device("s8_all");
  EXPECT_EQ(sum(u8).dtype(), kInt64);  // integers sum to s64, as torch
  EXPECT_EQ(sum(u8).item<int64_t>(), 255 * 256 / 2);
  EXPECT_EQ(sum(s8).item<int64_t>(), -128);
  EXPECT_EQ(amax(s8).dtype(), kInt8);
  EXPECT_EQ(amax(s8).item<int64_t>(), 127);
  EXPECT_EQ(argmax(u8).item<int64_t>(), 255);
  EXPECT_EQ(sum(lt(s8, 0)).item<int64_t>(), 128);
  const Tensor h = on_device("f16_a");
  const Tensor kept = where(gt(h, 0.0), h, zeros_like(h));
  EXPECT_EQ(kept.dtype(), kHalf);
  const std::vector<Half> a = from_torch("f16_a").values<Half>();
  const std::vector<Half> got = kept.cpu().values<Half>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(got[i].x, static_cast<float>(a[i]) > 0 ? a[i].x : Half(0.0f).x) << i;
  }
}

TEST_F(SmallDtypes, F16MatmulRoundsTheF32ProductOnce) {
  const Tensor a = on_device("f16_a").reshape({16, 32});
  const Tensor b = on_device("f16_b").reshape({32, 16});
  const Tensor product = matmul(a, b);
  ASSERT_EQ(product.dtype(), kHalf);
  const std::vector<Half> got = product.cpu().values<Half>();
  const std::vector<Half> av = from_torch("f16_a").values<Half>();
  const std::vector<Half> bv = from_torch("f16_b").values<Half>();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double exact = 0, size = 0;
      for (int k = 0; k < 32; ++k) {
        const double term =
            static_cast<double>(av[i * 32 + k]) * static_cast<double>(bv[k * 16 + j]);
        exact += term;
        size += std::abs(term);
      }
      // One f16 rounding of a sum whose f32 error is far smaller.
      EXPECT_NEAR(static_cast<float>(got[i * 16 + j]), exact,
                  std::abs(exact) * 0x1p-11 + size * 1e-6)
          << i << "," << j;
    }
  }
}

TEST_F(SmallDtypes, F16GradientsFlowInF16) {
  const Tensor w = on_device("f16_a").detach();
  w.requires_grad_();
  sum(w * w).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kHalf);
  const std::vector<Half> a = from_torch("f16_a").values<Half>();
  const std::vector<Half> grad = w.grad().cpu().values<Half>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(grad[i].x, Half(2.0f * static_cast<float>(a[i])).x) << i;  // 2x is exact in f16
  }
}

TEST_F(SmallDtypes, IndicesMustBeS32OrS64AsTorchs) {
  const Tensor x = full({4}, 1.0);
  EXPECT_THROW((void)index_select(x, 0, full({2}, 1, kUInt8)), ShapeError);
}

}  // namespace
}  // namespace axle::testing
