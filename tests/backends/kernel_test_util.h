// Test helpers for CPU kernels: run one kernel call through the CPU backend on host data given
// as doubles, and get the output back as doubles, so tests can compare against plain loops.
#pragma once

#include <Eigen/Core>
#include <cstring>
#include <random>
#include <vector>

#include "backends/backend.h"

namespace axle::testing {

/// Host data of any dtype, held as doubles.
struct HostTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<double> values;  // row-major, shape.numel() entries
};

inline double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kBF16:
      return static_cast<float>(Eigen::bfloat16(static_cast<float>(v)));
    case DType::kI32:
      return static_cast<int32_t>(v);
    case DType::kI64:
      return static_cast<int64_t>(v);
    case DType::kBool:
      return v != 0 ? 1 : 0;
    case DType::kF64:
      return v;
  }
  return v;
}

inline std::vector<std::byte> encode(const HostTensor& t) {
  std::vector<std::byte> bytes(t.values.size() * dtype_size(t.dtype));
  for (std::size_t i = 0; i < t.values.size(); ++i) {
    std::byte* p = bytes.data() + i * dtype_size(t.dtype);
    double v = t.values[i];
    switch (t.dtype) {
      case DType::kF32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::kF64: {
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::kBF16: {
        Eigen::bfloat16 x(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::kI32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::kI64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::kBool: {
        uint8_t x = v != 0;
        std::memcpy(p, &x, 1);
        break;
      }
    }
  }
  return bytes;
}

inline std::vector<double> decode(DType dtype, const std::byte* p, std::size_t n) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i, p += dtype_size(dtype)) {
    switch (dtype) {
      case DType::kF32: {
        float x;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case DType::kF64: {
        double x;
        std::memcpy(&x, p, 8);
        out[i] = x;
        break;
      }
      case DType::kBF16: {
        Eigen::bfloat16 x;
        std::memcpy(&x, p, 2);
        out[i] = static_cast<float>(x);
        break;
      }
      case DType::kI32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case DType::kI64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        out[i] = static_cast<double>(x);
        break;
      }
      case DType::kBool: {
        uint8_t x;
        std::memcpy(&x, p, 1);
        out[i] = x;
        break;
      }
    }
  }
  return out;
}

/// Runs `kernel` on `inputs` producing an output of `out_dtype`/`out_shape`; returns its values.
inline HostTensor run_kernel(Kernel kernel, const std::vector<HostTensor>& inputs, DType out_dtype,
                             const Shape& out_shape, std::vector<int64_t> ints = {},
                             std::vector<double> reals = {}) {
  static std::unique_ptr<Backend> backend = make_cpu_backend(1);
  Executable program;
  std::vector<IntrusivePtr<DeviceMemory>> buffers;
  std::vector<DeviceMemory*> raw;
  KernelCall call{kernel, {}, 0, std::move(ints), std::move(reals)};
  for (const HostTensor& in : inputs) {
    int32_t slot = static_cast<int32_t>(program.slots.size());
    program.slots.push_back({in.dtype, in.shape});
    program.input_slots.push_back(slot);
    call.inputs.push_back(slot);
    auto bytes = encode(in);
    buffers.push_back(backend->allocate(0, bytes.size()));
    backend->copy_to_device(0, bytes.data(), *buffers.back(), bytes.size());
    raw.push_back(buffers.back().get());
  }
  call.output = static_cast<int32_t>(program.slots.size());
  program.slots.push_back({out_dtype, out_shape});
  program.output_slots.push_back(call.output);
  program.calls.push_back(call);
  auto outputs = backend->execute(0, program, raw);
  std::vector<std::byte> host(outputs[0]->bytes());
  backend->copy_to_host(0, *outputs[0], host.data(), host.size());
  return {out_dtype, out_shape,
          decode(out_dtype, host.data(), static_cast<std::size_t>(out_shape.numel()))};
}

/// Random values for a tensor of `dtype` (integers in [lo, hi], floats uniform in [lo, hi)).
inline HostTensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng,
                                double lo = -2.0, double hi = 2.0) {
  HostTensor t{dtype, shape, std::vector<double>(static_cast<std::size_t>(shape.numel()))};
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> integer(static_cast<int64_t>(lo),
                                                 static_cast<int64_t>(hi));
  std::bernoulli_distribution coin(0.5);
  for (double& v : t.values) {
    if (dtype == DType::kBool)
      v = coin(rng);
    else if (is_integral(dtype))
      v = static_cast<double>(integer(rng));
    else
      v = round_to(dtype, real(rng));
  }
  return t;
}

/// Relative tolerance suited to results computed in `dtype`.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 1e-12;
    case DType::kF32:
      return 1e-5;
    case DType::kBF16:
      return 1e-2;
    default:
      return 0;
  }
}

}  // namespace axle::testing
