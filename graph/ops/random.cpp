// graph/ops: random numbers from the per-device counter-based stream (rand, randn, randint,
// bernoulli, and multinomial, which is made of rand and other ops). Each op takes the stream's
// current (seed, offset) and advances the offset; both go into the graph as s64 parameters, never
// attributes or constants, so the graph of a training step hashes the same every step although the
// offset moves on each time.
#include <fmt/format.h>

#include <limits>

#include "axle/graph/op_util.h"
#include "axle/graph/trace_context.h"

namespace axle {
namespace {

using ops::describe;

void require_valid_shape(std::string_view op, const Shape& shape, const Loc& where) {
  for (int64_t d : shape.dims()) {
    if (d < 0)
      ops::fail(op, fmt::format("negative dimension in shape {}", shape.to_string()), where);
  }
}

// The (seed, offset) operands of a random op producing `numel` values on `device`.
//
// The op consumes counters [offset, offset + numel) of the Philox 4x32-10 stream (see
// backends/cpu/random.cpp), but the offset advances by numel rounded up to a multiple of 4: each
// Philox block yields 4 words, and keeping every op's offset 4-aligned (as PyTorch does with its
// Philox offsets) lets a backend draw whole blocks for 4 consecutive elements without ever
// sharing a block with the next op. The few skipped counters cost nothing.
//
// Parameters carry their value as a double, so a seed or offset past 2^53 loses its low bits;
// seeds are small in practice and an offset would need 2^53 draws to get there.
Operands stream_operands(Device device, int64_t numel, const Loc& where) {
  const auto count = (static_cast<uint64_t>(numel) + 3) / 4 * 4;
  const RngState state = TraceContext::current().draw_random(device, count);
  // Node::parameter, not ops::scalar: a seed or offset of 0 or 1 must not become a constant.
  return Operands{Node::parameter(DType::kInt64, static_cast<double>(state.seed), where),
                  Node::parameter(DType::kInt64, static_cast<double>(state.offset), where)};
}

void require_floating(std::string_view op, DType dtype, const Loc& where) {
  if (!is_floating(dtype)) {
    ops::fail(op, fmt::format("needs a floating-point dtype, not {}", dtype_name(dtype)), where);
  }
}

}  // namespace

void set_rng_state(uint64_t seed, Device device) {
  TraceContext::current().set_rng_state(device, seed);
}

uint64_t get_rng_state(Device device) { return TraceContext::current().rng_state(device).seed; }

Tensor rand(const Shape& shape, DType dtype, Device device, Loc where) {
  require_valid_shape("rand", shape, where);
  require_floating("rand", dtype, where);
  return ops::make_result(Op::kRandUniform, dtype, shape,
                          stream_operands(device, shape.numel(), where), device, where, IntAttrs{},
                          RealAttrs{0.0, 1.0});
}

Tensor randn(const Shape& shape, DType dtype, Device device, Loc where) {
  require_valid_shape("randn", shape, where);
  require_floating("randn", dtype, where);
  return ops::make_result(Op::kRandNormal, dtype, shape,
                          stream_operands(device, shape.numel(), where), device, where, IntAttrs{},
                          RealAttrs{0.0, 1.0});
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device,
               Loc where) {
  require_valid_shape("randint", shape, where);
  if (high <= low) {
    ops::fail("randint",
              fmt::format("high ({}) must be greater than low ({}) for shape {}", high, low,
                          shape.to_string()),
              where);
  }
  // Checked here rather than when the step runs, where the error would be far from this line.
  // As torch's check of `from` and `to - 1` against the dtype's range.
  const auto within = [&](int64_t min, int64_t max) { return low >= min && high - 1 <= max; };
  bool fits = true;
  switch (dtype) {
    case DType::kBool:
      fits = within(0, 1);
      break;
    case DType::kUInt8:
      fits = within(0, 255);
      break;
    case DType::kInt8:
      fits = within(-128, 127);
      break;
    case DType::kInt16:
      fits = within(-32768, 32767);
      break;
    case DType::kInt32:
      fits = within(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      break;
    case DType::kFloat16:
      fits = within(-65504, 65504);
      break;
    default:
      break;
  }
  if (!fits) {
    ops::fail("randint",
              fmt::format("[{}, {}) does not fit in {}", low, high, describe(dtype, shape)), where);
  }
  return ops::make_result(Op::kRandInt, dtype, shape, stream_operands(device, shape.numel(), where),
                          device, where, IntAttrs{low, high});
}

Tensor bernoulli(const Tensor& p, Loc where) {
  ops::require_defined("bernoulli", p, "the probabilities", where);
  if (!is_floating(p.dtype())) {
    ops::fail("bernoulli",
              fmt::format("the probabilities must be floating-point, not {}", describe(p)), where);
  }
  Operands operands = stream_operands(p.device(), p.numel(), where);
  operands.push_back(ops::value_as(p, p.dtype(), where));
  return ops::make_result(Op::kBernoulli, p.dtype(), p.shape(), std::move(operands), p.device(),
                          where);
}

Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device, Loc where) {
  require_valid_shape("bernoulli", shape, where);
  if (!(p >= 0 && p <= 1)) {
    ops::fail("bernoulli", fmt::format("p = {} is outside [0, 1] (shape {})", p, shape.to_string()),
              where);
  }
  // The kernel compares against p in p's own floating dtype, whatever the output's: f32 (f64
  // for an f64 output) so that bf16 rounding does not shift p (0.3 would become 0.30078).
  const DType p_dtype = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Operands operands = stream_operands(device, shape.numel(), where);
  operands.push_back(ops::scalar(p, p_dtype, where));
  return ops::make_result(Op::kBernoulli, dtype, shape, std::move(operands), device, where);
}

// Composite, in f64 so that cumulative sums of many small weights still separate them.
// With replacement: each draw u in [0, 1) picks the first index whose normalised cumulative
// weight exceeds u (the count of those that do not), so a zero weight, whose cumulative weight
// equals its predecessor's, is never picked, and the last cumulative weight is exactly 1 > u.
// Without replacement: Gumbel-top-k — the num_samples largest log(w) - log(-log(u)) are a draw
// without replacement, in the order sequential sampling would give them.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Loc where) {
  ops::require_defined("multinomial", probs, "the probabilities", where);
  if (probs.dim() != 1 && probs.dim() != 2) {
    ops::fail("multinomial",
              fmt::format("the probabilities must be 1-d or 2-d, not {}", describe(probs)), where);
  }
  if (!is_floating(probs.dtype())) {
    ops::fail("multinomial",
              fmt::format("the probabilities must be floating-point, not {}", describe(probs)),
              where);
  }
  const int64_t categories = probs.size(-1);
  if (categories == 0) {
    ops::fail("multinomial", fmt::format("needs at least one category, got {}", describe(probs)),
              where);
  }
  if (num_samples <= 0 || (!replacement && num_samples > categories)) {
    ops::fail("multinomial",
              fmt::format("cannot draw {} samples {} replacement from {}", num_samples,
                          replacement ? "with" : "without", describe(probs)),
              where);
  }
  const Tensor weights =
      cast(probs.dim() == 1 ? unsqueeze(probs, 0, where) : probs, DType::kFloat64,
           where);  // [N, C]
  const int64_t rows = weights.size(0);
  Tensor samples;
  if (replacement) {
    const Tensor cdf = cumsum(weights, 1, where);
    const Tensor normalised =
        unsqueeze(div(cdf, slice(cdf, 1, -1, categories, 1, where), where), 1, where);  // [N, 1, C]
    const Tensor u = rand(Shape{rows, num_samples, 1}, DType::kFloat64, probs.device(), where);
    samples = sum(cast(logical_not(lt(u, normalised, where), where), DType::kInt64, where), {2},
                  false, where);
  } else {
    const Tensor u = rand(Shape{rows, categories}, DType::kFloat64, probs.device(), where);
    const Tensor keys = sub(log(weights, where), log(neg(log(u, where), where), where), where);
    samples = topk(keys, num_samples, 1, true, true, where).indices;
  }
  return probs.dim() == 1 ? squeeze(samples, 0, where) : samples;
}

}  // namespace axle
