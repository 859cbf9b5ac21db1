// backends/cpu kConvTranspose2d: against a loop in double that gathers each output element's
// terms (the kernel scatters them), over strides, padding, dilation, groups and output padding,
// in every floating dtype; bf16 rounds the f32 sum once; every thread count gives the same bits;
// malformed calls are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

struct Form {
  const char* name;
  Shape x, w;
  int64_t stride, pad, dilation, groups, output_padding;
};

void PrintTo(const Form& form, std::ostream* os) { *os << form.name; }

int64_t output_size(int64_t in, int64_t k, const Form& f) {
  return (in - 1) * f.stride - 2 * f.pad + f.dilation * (k - 1) + f.output_padding + 1;
}

Shape output_shape(const Form& f) {
  return {f.x[0], f.w[1] * f.groups, output_size(f.x[2], f.w[2], f),
          output_size(f.x[3], f.w[3], f)};
}

std::vector<int64_t> ints_of(const Form& f) {
  return {f.stride, f.stride, f.pad, f.pad, f.dilation, f.dilation, f.groups};
}

// out[n, o, r, z] = sum over c in o's group, i, j with r = y * stride - pad + i * dilation (and z
// alike) of x[n, c, y, x'] * w[c, o % O_g, i, j]; scale: the sum of the terms' magnitudes.
Reference gather_reference(const HostTensor& x, const HostTensor& w, const Form& f) {
  const Shape out = output_shape(f);
  const int64_t C = f.x[1], H = f.x[2], W = f.x[3], KH = f.w[2], KW = f.w[3];
  const int64_t O = out[1], OH = out[2], OW = out[3], cg = C / f.groups, og = O / f.groups;
  Reference ref{out, {}, {}};
  auto source = [&](int64_t at, int64_t k, int64_t size) {
    const int64_t num = at + f.pad - k * f.dilation;
    return num < 0 || num % f.stride != 0 || num / f.stride >= size ? -1 : num / f.stride;
  };
  for (int64_t n = 0; n < out[0]; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t r = 0; r < OH; ++r) {
        for (int64_t z = 0; z < OW; ++z) {
          double sum = 0, magnitude = 0;
          for (int64_t c = o / og * cg; c < (o / og + 1) * cg; ++c) {
            for (int64_t i = 0; i < KH; ++i) {
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t y = source(r, i, H), q = source(z, j, W);
                if (y < 0 || q < 0) continue;
                const double term = x.values[((n * C + c) * H + y) * W + q] *
                                    w.values[((c * og + o % og) * KH + i) * KW + j];
                sum += term;
                magnitude += std::abs(term);
              }
            }
          }
          ref.values.push_back(sum);
          ref.scale.push_back(std::max(1.0, magnitude));
        }
      }
    }
  }
  return ref;
}

const Form kForms[] = {
    {"stride2_pad1", {2, 5, 6, 7}, {5, 3, 3, 3}, 2, 1, 1, 1, 1},
    {"stride1", {1, 4, 5, 5}, {4, 6, 3, 2}, 1, 0, 1, 1, 0},
    {"stride3_dilation2", {2, 3, 4, 5}, {3, 2, 3, 3}, 3, 2, 2, 1, 2},
    {"groups", {2, 6, 5, 4}, {6, 2, 3, 3}, 2, 1, 1, 3, 0},
    {"pointwise_stride2", {3, 8, 7, 7}, {8, 4, 1, 1}, 2, 0, 1, 1, 1},
    // Taps for 64 output channels over 30 rows of 30: more than one block of input rows.
    {"blocks", {1, 16, 30, 30}, {16, 64, 3, 3}, 2, 1, 1, 1, 1},
    // 7 x 7 planes over five images: runs of images side by side (three and two), the taps of 64
    // output channels in three blocks.
    {"small_planes_in_runs", {5, 6, 7, 7}, {6, 64, 3, 3}, 2, 1, 1, 1, 1},
};

class ConvTransposeForms : public ::testing::TestWithParam<std::tuple<DType, Form>> {};

TEST_P(ConvTransposeForms, MatchTheGatheringLoop) {
  const auto [dtype, form] = GetParam();
  std::mt19937 rng(51);
  const HostTensor x = random_tensor(dtype, form.x, rng);
  const HostTensor w = random_tensor(dtype, form.w, rng);
  const Reference want = gather_reference(x, w, form);
  expect_close(run_kernel(Kernel::kConvTranspose2d, {x, w}, dtype, want.shape, ints_of(form)), want,
               dtype, form.name);
}

INSTANTIATE_TEST_SUITE_P(CpuConvTranspose, ConvTransposeForms,
                         ::testing::Combine(::testing::ValuesIn(kFloats),
                                            ::testing::ValuesIn(kForms)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).name;
                         });

// bf16 operands are multiplied exactly and summed in f32: the output is that sum rounded once,
// the f32 kernel's result on the same values narrowed.
TEST(CpuConvTranspose, Bf16RoundsTheF32SumOnce) {
  std::mt19937 rng(52);
  const Form& form = kForms[0];
  const HostTensor x = random_tensor(DType::kBFloat16, form.x, rng);
  const HostTensor w = random_tensor(DType::kBFloat16, form.w, rng);
  const HostTensor bf16 = call_kernel_directly(Kernel::kConvTranspose2d, {x, w}, DType::kBFloat16,
                                               output_shape(form), ints_of(form));
  const HostTensor x32{DType::kFloat32, x.shape, x.values}, w32{DType::kFloat32, w.shape, w.values};
  const HostTensor f32 = call_kernel_directly(Kernel::kConvTranspose2d, {x32, w32}, DType::kFloat32,
                                              output_shape(form), ints_of(form));
  for (std::size_t i = 0; i < f32.values.size(); ++i) {
    ASSERT_EQ(bf16.values[i], round_to(DType::kBFloat16, f32.values[i])) << "element " << i;
  }
}

TEST(CpuConvTranspose, EveryThreadCountGivesTheSameBits) {
  std::mt19937 rng(53);
  for (const Form& form : {kForms[0], kForms[5], kForms[6],
                           Form{"one_image", {1, 32, 14, 14}, {32, 16, 3, 3}, 2, 1, 1, 1, 1}}) {
    for (DType dtype : kFloats) {
      const HostTensor x = random_tensor(dtype, form.x, rng);
      const HostTensor w = random_tensor(dtype, form.w, rng);
      const HostTensor one = call_kernel_directly(Kernel::kConvTranspose2d, {x, w}, dtype,
                                                  output_shape(form), ints_of(form), 1);
      for (int threads : {2, 3}) {
        ASSERT_EQ(call_kernel_directly(Kernel::kConvTranspose2d, {x, w}, dtype, output_shape(form),
                                       ints_of(form), threads)
                      .values,
                  one.values)
            << form.name << " " << label(dtype) << ", " << threads << " threads";
      }
    }
  }
}

TEST(CpuConvTranspose, RefusesMalformedCalls) {
  const std::vector<int64_t> ints{2, 2, 1, 1, 1, 1, 1};
  auto refused = [](const std::string& message, const std::string& part) {
    return contains(message, part) && contains(message, "conv_transpose2d");
  };
  EXPECT_TRUE(refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}}, {1, 4, 5, 5}, ints),
                      "takes [x, w]"));
  EXPECT_TRUE(
      refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {3, 4, 3, 3}}, {1, 4, 5, 5}, ints),
              "w's dim 0 must be x's channels"));
  // (3 - 1) * 2 - 2 + 3 = 5, plus an output padding below 2: 5 or 6.
  EXPECT_TRUE(
      refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {2, 4, 3, 3}}, {1, 4, 7, 5}, ints),
              "an output size of 7 is not 5 plus an output padding below 2"));
  EXPECT_TRUE(
      refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {2, 4, 3, 3}}, {1, 3, 5, 5}, ints),
              "the output must be [1, 4, OH, OW]"));
  EXPECT_TRUE(refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {2, 4, 3, 3}},
                                {1, 4, 5, 5}, {2, 2, 1, 1, 1, 1}),
                      "ints must be"));
  EXPECT_TRUE(refused(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {2, 4, 3, 3}},
                                {1, 4, 5, 5}, ints, DType::kInt32),
                      "supports f32, f64 and bf16"));
  EXPECT_EQ(rejection(Kernel::kConvTranspose2d, {{1, 2, 3, 3}, {2, 4, 3, 3}}, {1, 4, 6, 6}, ints),
            "");
}

}  // namespace
}  // namespace axle::testing
