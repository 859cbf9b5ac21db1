// graph/reference: errors, element access and index math shared by the op families.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "axle/engine/element.h"
#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

const char* basename(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

std::string describe(DType dtype, const Shape& shape) {
  return fmt::format("{}{}", dtype_name(dtype), shape.to_string());
}

template <class T>
T read(const CpuTensor& t, int64_t i) {
  T v;
  std::memcpy(&v, t.bytes.data() + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void write(CpuTensor& t, int64_t i, T v) {
  std::memcpy(t.bytes.data() + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
}

// Truncation toward zero; NaN and values outside I's range give I's minimum, which is what
// x86's cvttss2si / cvttsd2si return and so what the CPU backend's casts give.
template <class I>
I truncate(double value) {
  const double t = std::trunc(value);
  constexpr double kLow = static_cast<double>(std::numeric_limits<I>::min());  // -2^31 or -2^63
  if (!(t >= kLow && t < -kLow)) return std::numeric_limits<I>::min();
  return static_cast<I>(t);
}

}  // namespace

void fail(const OpCall& call, std::string_view why) {
  std::string operands;
  for (const NodePtr& operand : call.node.operands()) {
    if (!operands.empty()) operands += ", ";
    operands += describe(operand->dtype(), operand->shape());
  }
  const SourceLocation& where = call.node.where();
  const std::string line = where.known() ? fmt::format("at {}:{} in {}", basename(where.file()),
                                                       where.line(), where.function())
                                         : std::string("traced at an unknown line");
  throw std::invalid_argument(fmt::format("reference evaluator: {}({}) -> {}: {} ({})",
                                          op_name(call.node.op()), operands,
                                          describe(call.dtype(), call.shape()), why, line));
}

void expect_operands(const OpCall& call, std::size_t count) {
  if (call.operands.size() != count) {
    fail(call, fmt::format("takes {} operand{}, not {}", count, count == 1 ? "" : "s",
                           call.operands.size()));
  }
}

void expect_ints(const OpCall& call, std::size_t count, std::string_view layout) {
  if (call.ints().size() < count) {
    fail(call, fmt::format("int attributes must be {}, not {} values", layout, call.ints().size()));
  }
}

void expect_dtype(const OpCall& call, std::string_view what, DType got, DType want) {
  if (got != want) {
    fail(call, fmt::format("{} is {}, expected {}", what, dtype_name(got), dtype_name(want)));
  }
}

CpuTensor zeros(DType dtype, const Shape& shape) {
  return CpuTensor{
      dtype, shape,
      std::vector<std::byte>(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype))};
}

CpuTensor result_of(const OpCall& call) { return zeros(call.dtype(), call.shape()); }

double real_at(const CpuTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::kFloat32:
      return read<float>(t, i);
    case DType::kFloat64:
      return read<double>(t, i);
    case DType::kBFloat16:
      return bf16_bits_to_float(read<uint16_t>(t, i));
    case DType::kInt32:
      return read<int32_t>(t, i);
    case DType::kInt64:
      return static_cast<double>(read<int64_t>(t, i));
    case DType::kBool:
      return read<uint8_t>(t, i) != 0;
    case DType::kFloat16:
      return half_bits_to_float(read<uint16_t>(t, i));
    case DType::kInt8:
      return read<int8_t>(t, i);
    case DType::kUInt8:
      return read<uint8_t>(t, i);
    case DType::kInt16:
      return read<int16_t>(t, i);
  }
  return 0;
}

int64_t int_at(const CpuTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::kInt32:
      return read<int32_t>(t, i);
    case DType::kInt64:
      return read<int64_t>(t, i);
    case DType::kBool:
      return read<uint8_t>(t, i) != 0;
    case DType::kInt8:
      return read<int8_t>(t, i);
    case DType::kUInt8:
      return read<uint8_t>(t, i);
    case DType::kInt16:
      return read<int16_t>(t, i);
    default:
      return truncate<int64_t>(real_at(t, i));
  }
}

void store_real(CpuTensor& t, int64_t i, double value) {
  switch (t.dtype) {
    case DType::kFloat32:
      return write(t, i, static_cast<float>(value));
    case DType::kFloat64:
      return write(t, i, value);
    case DType::kBFloat16:
      return write(t, i, float_to_bf16_bits(static_cast<float>(value)));
    case DType::kInt32:
      return write(t, i, truncate<int32_t>(value));
    case DType::kInt64:
      return write(t, i, truncate<int64_t>(value));
    case DType::kBool:
      return write(t, i, static_cast<uint8_t>(value != 0));
    // As the kernels: f16 from the f32 result, the small integers wrapped from s32.
    case DType::kFloat16:
      return write(t, i, float_to_half_bits(static_cast<float>(value)));
    case DType::kInt8:
      return write(t, i, static_cast<int8_t>(truncate<int32_t>(value)));
    case DType::kUInt8:
      return write(t, i, static_cast<uint8_t>(truncate<int32_t>(value)));
    case DType::kInt16:
      return write(t, i, static_cast<int16_t>(truncate<int32_t>(value)));
  }
}

void store_int(CpuTensor& t, int64_t i, int64_t value) {
  switch (t.dtype) {
    case DType::kFloat32:
      return write(t, i, static_cast<float>(value));
    case DType::kFloat64:
      return write(t, i, static_cast<double>(value));
    case DType::kBFloat16:
      return write(t, i, float_to_bf16_bits(static_cast<float>(value)));
    case DType::kInt32:
      return write(t, i, static_cast<int32_t>(value));  // modular since C++20
    case DType::kInt64:
      return write(t, i, value);
    case DType::kBool:
      return write(t, i, static_cast<uint8_t>(value != 0));
    case DType::kFloat16:
      return write(t, i, float_to_half_bits(static_cast<float>(value)));
    case DType::kInt8:
      return write(t, i, static_cast<int8_t>(value));
    case DType::kUInt8:
      return write(t, i, static_cast<uint8_t>(value));
    case DType::kInt16:
      return write(t, i, static_cast<int16_t>(value));
  }
}

void copy_element(const CpuTensor& from, int64_t from_index, CpuTensor& to, int64_t to_index) {
  const std::size_t size = dtype_size(from.dtype);
  std::memcpy(to.bytes.data() + static_cast<std::size_t>(to_index) * size,
              from.bytes.data() + static_cast<std::size_t>(from_index) * size, size);
}

Index strides_of(const Shape& shape) {
  Index strides{};
  int64_t stride = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

int64_t offset_of(const Index& index, const Index& strides, int rank) {
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d) offset += index[d] * strides[d];
  return offset;
}

bool broadcasts_to(const Shape& in, const Shape& out) {
  if (in.rank() > out.rank()) return false;
  for (int d = in.rank() - 1, o = out.rank() - 1; d >= 0; --d, --o) {
    if (in[d] != 1 && in[d] != out[o]) return false;
  }
  return true;
}

Index broadcast_strides(const Shape& in, const Shape& out) {
  Index strides{};
  int64_t stride = 1;
  for (int d = in.rank() - 1, o = out.rank() - 1; d >= 0; --d, --o) {
    if (in[d] != 1) strides[o] = stride;
    stride *= in[d];
  }
  return strides;
}

}  // namespace axle::reference::detail
