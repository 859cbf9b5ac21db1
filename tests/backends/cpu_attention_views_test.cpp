// Tests attention's views (backends/executable.h's kAttentionView bits): q, k and v read in place
// from a [B, T, 3 H D] projection, the backward's grad from [B, T, H D] and its gradients written
// into [B, T, 3 H D], give the bits of the same calls on the heads copied out to [B, H, T, D]
// (the slices and permutes the views replace), for f32, f64 and bf16 (vdpbf16ps where the
// processor has it), causal or masked, on 1 and 3 threads; and views that do not fit are refused
// by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

constexpr Kernel kForward = Kernel::kScaledDotProductAttention;
constexpr Kernel kBackward = Kernel::kScaledDotProductAttentionBackward;

struct Heads {
  int64_t B, H, T, D;
  [[nodiscard]] int64_t width() const { return H * D; }
};

// Columns [first, first + H D) of rows [B, T, W] as contiguous heads [B, H, T, D].
HostTensor heads_of(const HostTensor& rows, const Heads& h, int64_t first) {
  const int64_t W = rows.shape[2];
  HostTensor out{rows.dtype, {h.B, h.H, h.T, h.D}, {}};
  for (int64_t b = 0; b < h.B; ++b) {
    for (int64_t head = 0; head < h.H; ++head) {
      for (int64_t t = 0; t < h.T; ++t) {
        for (int64_t d = 0; d < h.D; ++d) {
          out.values.push_back(
              rows.values[static_cast<std::size_t>((b * h.T + t) * W + first + head * h.D + d)]);
        }
      }
    }
  }
  return out;
}

// The view ints of the heads at columns [first, first + H D) of rows [B, T, W].
std::vector<int64_t> view_of(const Heads& h, int64_t W, int64_t first) {
  return {h.T, h.D, first, h.T * W, h.D, W};
}

std::vector<int64_t> with_views(std::vector<int64_t> ints, int64_t bits,
                                const std::vector<std::vector<int64_t>>& views) {
  ints.push_back(bits);
  for (const std::vector<int64_t>& view : views) ints.insert(ints.end(), view.begin(), view.end());
  return ints;
}

void expect_same_bits(const HostTensor& got, const std::vector<double>& want,
                      const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got.values[i], want[i]) << what << " at " << i;
  }
}

struct Setup {
  Heads heads;
  DType dtype;
  DType out;  // the forward's output (f32 for bf16 operands) and the backward's gradients
  bool causal;
  bool mask;
};

void check_views(const Setup& s, int threads) {
  const Heads& h = s.heads;
  const std::string what = fmt::format("{} D={} T={} causal={} mask={} threads={}",
                                       dtype_name(s.dtype), h.D, h.T, s.causal, s.mask, threads);
  std::mt19937 rng(static_cast<uint32_t>(h.D * 131 + h.T));
  const int64_t W = 3 * h.width();
  const HostTensor qkv = random_tensor(s.dtype, {h.B, h.T, W}, rng);
  const HostTensor q = heads_of(qkv, h, 0), k = heads_of(qkv, h, h.width()),
                   v = heads_of(qkv, h, 2 * h.width());
  std::vector<int64_t> ints = {s.causal ? 1 : 0, s.mask ? 1 : 0};
  std::vector<HostTensor> extra;
  if (s.mask) extra.push_back(random_tensor(DType::kBool, {h.T, h.T}, rng, 0, 1));
  const std::vector<double> scale = {0.25};
  const DType forward_dtype = s.dtype == DType::kBFloat16 ? DType::kFloat32 : s.dtype;
  const Shape forward_shape = {h.B, h.H, h.T, h.D + 1};

  std::vector<HostTensor> plain = {q, k, v}, viewed = {qkv, qkv, qkv};
  plain.insert(plain.end(), extra.begin(), extra.end());
  viewed.insert(viewed.end(), extra.begin(), extra.end());
  const std::vector<int64_t> qkv_views =
      with_views(ints, kAttentionViewQ | kAttentionViewK | kAttentionViewV,
                 {view_of(h, W, 0), view_of(h, W, h.width()), view_of(h, W, 2 * h.width())});
  const HostTensor forward =
      call_kernel_directly(kForward, plain, forward_dtype, forward_shape, ints, threads, scale);
  expect_same_bits(call_kernel_directly(kForward, viewed, forward_dtype, forward_shape, qkv_views,
                                        threads, scale),
                   forward.values, "forward " + what);

  const HostTensor grad_rows = random_tensor(s.dtype, {h.B, h.T, h.width()}, rng);
  const HostTensor grad = heads_of(grad_rows, h, 0);
  plain = {q, k, v, forward, grad};
  viewed = {qkv, qkv, qkv, forward, grad_rows};
  plain.insert(plain.end(), extra.begin(), extra.end());
  viewed.insert(viewed.end(), extra.begin(), extra.end());
  const HostTensor gradients =
      call_kernel_directly(kBackward, plain, s.out, {h.B, h.H, 3 * h.T, h.D}, ints, threads, scale);
  std::vector<int64_t> output_view;
  for (int64_t part = 0; part < 3; ++part) {
    output_view.insert(output_view.end(), {part * h.width(), h.T * W, h.D, W});
  }
  const std::vector<int64_t> all_views =
      with_views(ints,
                 kAttentionViewQ | kAttentionViewK | kAttentionViewV | kAttentionViewGrad |
                     kAttentionViewOutput,
                 {view_of(h, W, 0), view_of(h, W, h.width()), view_of(h, W, 2 * h.width()),
                  view_of(h, h.width(), 0), output_view});
  const HostTensor written =
      call_kernel_directly(kBackward, viewed, s.out, {h.B, h.T, W}, all_views, threads, scale);
  // Row t of gradient `part` of head `head` lands in columns part H D + head D of row t.
  std::vector<double> want;
  for (int64_t b = 0; b < h.B; ++b) {
    for (int64_t t = 0; t < h.T; ++t) {
      for (int64_t part = 0; part < 3; ++part) {
        for (int64_t head = 0; head < h.H; ++head) {
          for (int64_t d = 0; d < h.D; ++d) {
            want.push_back(gradients.values[static_cast<std::size_t>(
                ((b * h.H + head) * 3 * h.T + part * h.T + t) * h.D + d)]);
          }
        }
      }
    }
  }
  expect_same_bits(written, want, "backward " + what);
}

TEST(CpuAttentionViews, ProjectionHeadsReadInPlaceGiveTheBitsOfTheirCopies) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Heads& heads : {Heads{2, 3, 70, 8}, Heads{1, 2, 130, 5}}) {
      for (int threads : {1, 3}) {
        check_views({heads, dtype, dtype, true, false}, threads);
        check_views({heads, dtype, dtype, false, true}, threads);
      }
    }
  }
}

// bf16 operands take vdpbf16ps where the processor has it and every row starts on a pair; an
// odd head width takes the f32 path.
TEST(CpuAttentionViews, Bf16ProjectionHeadsGiveTheBitsOfTheirCopies) {
  for (const Heads& heads : {Heads{2, 4, 128, 32}, Heads{2, 3, 70, 8}, Heads{1, 2, 66, 5}}) {
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      for (int threads : {1, 3}) {
        check_views({heads, DType::kBFloat16, out, true, false}, threads);
      }
    }
  }
  check_views({{2, 3, 70, 8}, DType::kBFloat16, DType::kBFloat16, false, true}, 2);
}

TEST(CpuAttentionViews, ViewsThatDoNotFitAreRefusedByName) {
  const HostTensor qkv{DType::kFloat32, {2, 6, 12}, std::vector<double>(144)};
  const std::vector<int64_t> fits = {6, 2, 0, 72, 2, 12};
  const std::vector<int64_t> past_the_end = {6, 2, 10, 72, 2, 12};
  const Shape out = {2, 2, 6, 3};
  auto refusal = [&](std::vector<int64_t> ints) {
    try {
      call_kernel_directly(kForward, {qkv, qkv, qkv}, DType::kFloat32, out, std::move(ints), 1,
                           {1.0});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(with_views({0, 0}, 7, {fits, fits, fits})), "");
  std::string e = refusal(with_views({0, 0}, 7, {fits, past_the_end, fits}));
  EXPECT_TRUE(contains(e, "the view of operand 1 reads outside its 144 elements")) << e;
  e = refusal(with_views({0, 0}, 7 | kAttentionViewGrad, {fits, fits, fits, fits}));
  EXPECT_TRUE(contains(e, "view bits 15")) << e;
  e = refusal(with_views({0, 0}, 7, {fits, fits}));
  EXPECT_TRUE(contains(e, "the views' ints end early")) << e;
  e = refusal(with_views({0, 0}, 1, {fits, fits}));
  EXPECT_TRUE(contains(e, "6 ints after the views")) << e;
}

}  // namespace
}  // namespace axle::testing
