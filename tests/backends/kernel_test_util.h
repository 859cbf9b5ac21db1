// Test helpers for CPU kernels: run one kernel call through the CPU backend on host data given
// as doubles, and get the output back as doubles, so tests can compare against plain loops.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/backends/backend.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/engine/element.h"
#include "tests/round_to.h"

namespace axle {
/// Names the kernel in parameterised test output.
inline void PrintTo(Kernel kernel, std::ostream* os) { *os << kernel_name(kernel); }
}  // namespace axle

namespace axle::testing {

/// The instruction set the kernel tests run on: AXLE_CPU_ISA as the backend reads it ("auto" when
/// unset), so CTest runs the kernel tests once per path (tests/backends/CMakeLists.txt).
inline std::string requested_cpu_isa() {
  const char* name = std::getenv("AXLE_CPU_ISA");
  return name ? name : "auto";
}

/// Sets the requested instruction set before the first test; a path this processor lacks skips
/// the run (it cannot be tested here), an unknown name fails it.
class CpuIsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string name = requested_cpu_isa();
    const std::optional<cpu::CpuIsa> isa = cpu::parse_cpu_isa(name);
    if (name != "auto" && !isa) FAIL() << "AXLE_CPU_ISA=" << name << " names no instruction set";
    if (isa && *isa > cpu::detected_cpu_isa()) {
      GTEST_SKIP() << "this processor lacks " << name << " (it has "
                   << cpu::cpu_isa_name(cpu::detected_cpu_isa()) << ")";
    }
    cpu::set_cpu_isa(name, "AXLE_CPU_ISA");
  }
};
inline ::testing::Environment* const kCpuIsaEnvironment =
    ::testing::AddGlobalTestEnvironment(new CpuIsaEnvironment);

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const std::vector<DType> kFloats = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};
inline const std::vector<DType> kAll = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                        DType::kInt32,   DType::kInt64,   DType::kBool};

inline std::string label(DType dtype) { return std::string(dtype_name(dtype)); }

/// Host data of any dtype, held as doubles.
struct HostTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<double> values;  // row-major, shape.numel() entries
};

inline std::vector<std::byte> encode(const HostTensor& t) {
  const std::size_t size = dtype_size(t.dtype);
  std::vector<std::byte> bytes(t.values.size() * size);
  for (std::size_t i = 0; i < t.values.size(); ++i) {
    store_element(t.dtype, t.values[i], bytes.data() + i * size);
  }
  return bytes;
}

inline std::vector<double> decode(DType dtype, const std::byte* p, std::size_t n) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = load_element(dtype, p + i * dtype_size(dtype));
  return out;
}

/// Runs `kernel` on `inputs` producing an output of `out_dtype`/`out_shape`; returns its values.
inline HostTensor run_kernel(Kernel kernel, const std::vector<HostTensor>& inputs, DType out_dtype,
                             const Shape& out_shape, std::vector<int64_t> ints = {},
                             std::vector<double> reals = {}) {
  static std::unique_ptr<Backend> backend = make_cpu_backend(1, {.cpu_isa = requested_cpu_isa()});
  Executable program;
  std::vector<IntrusivePtr<DeviceMemory>> buffers;
  KernelCall call{kernel, {}, 0, std::move(ints), std::move(reals)};
  for (const HostTensor& in : inputs) {
    int32_t slot = static_cast<int32_t>(program.slots.size());
    program.slots.push_back({in.dtype, in.shape});
    program.input_slots.push_back(slot);
    call.inputs.push_back(slot);
    auto bytes = encode(in);
    buffers.push_back(backend->allocate(0, bytes.size()));
    backend->copy_to_device(0, bytes.data(), *buffers.back(), bytes.size());
  }
  call.output = static_cast<int32_t>(program.slots.size());
  program.slots.push_back({out_dtype, out_shape});
  program.output_slots.push_back(call.output);
  program.calls.push_back(call);
  auto outputs = backend->execute(0, program, buffers);
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
    case DType::kFloat64:
      return 1e-12;
    case DType::kFloat32:
      return 1e-5;
    case DType::kBFloat16:
      return 1e-2;
    default:
      return 0;
  }
}

/// Calls the kernel straight from the CPU kernel table, with the output buffer pre-filled with
/// 0xFF bytes (NaN for floats), so a kernel that skips writing an entry cannot pass by luck and
/// the exception type it throws reaches the test unwrapped. `threads`: the compute pool's size
/// (1: the calling thread alone).
inline HostTensor call_kernel_directly(Kernel kernel, const std::vector<HostTensor>& inputs,
                                       DType out_dtype, const Shape& out_shape,
                                       std::vector<int64_t> ints, int threads = 1,
                                       std::vector<double> reals = {}) {
  std::vector<BufferDesc> descs;
  std::vector<std::vector<std::byte>> bytes;
  for (const HostTensor& in : inputs) {
    descs.push_back({in.dtype, in.shape});
    bytes.push_back(encode(in));
  }
  const BufferDesc out_desc{out_dtype, out_shape};
  std::vector<std::byte> out(out_desc.bytes(), std::byte{0xFF});
  std::vector<cpu::ConstView> views;
  for (std::size_t i = 0; i < inputs.size(); ++i) views.push_back({bytes[i].data(), &descs[i]});
  const KernelCall call{kernel, {}, 0, std::move(ints), std::move(reals)};
  cpu::ComputePool pool(threads);
  cpu::kernel_table()[static_cast<std::size_t>(kernel)](
      cpu::KernelArgs{call, views, {out.data(), &out_desc}, pool});
  return {out_dtype, out_shape, decode(out_dtype, out.data(), out_shape.numel())};
}

/// The std::invalid_argument message call_kernel_directly gets ("" if the kernel accepts the
/// call).
inline std::string invalid_argument_message(Kernel kernel, const std::vector<HostTensor>& inputs,
                                            DType out_dtype, const Shape& out_shape,
                                            std::vector<int64_t> ints) {
  try {
    call_kernel_directly(kernel, inputs, out_dtype, out_shape, std::move(ints));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// The std::invalid_argument message the kernel gives for all-zero inputs of these shapes, called
/// straight from the kernel table so the backend does not wrap it ("" if the kernel accepts the
/// call).
inline std::string rejection(Kernel kernel, const std::vector<Shape>& inputs, const Shape& out,
                             std::vector<int64_t> ints, DType dtype = DType::kFloat32) {
  std::vector<HostTensor> zeros;
  for (const Shape& s : inputs) zeros.push_back({dtype, s, std::vector<double>(s.numel(), 0.0)});
  return invalid_argument_message(kernel, zeros, dtype, out, std::move(ints));
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// |got - want| <= tol * scale per element, where scale defaults to max(1, |want|); NaN must match
/// NaN and infinities exactly. Reports the first five failures.
inline void expect_values(const std::vector<double>& got, const std::vector<double>& want,
                          double tol, const std::string& what,
                          const std::vector<double>& scale = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (std::size_t i = 0; i < want.size() && failures < 5; ++i) {
    const double g = got[i], w = want[i];
    const double s = scale.empty() ? std::max(1.0, std::abs(w)) : scale[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::abs(g - w) <= tol * s;
    if (!ok) {
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
      ++failures;
    }
  }
}

/// Expected values of a loop reference plus, per entry, the sum of the magnitudes of its terms
/// (what rounding errors scale with, so a tolerance stays meaningful when terms cancel).
struct Reference {
  Shape shape;
  std::vector<double> values, scale;
};

/// Every entry of `out` equals the reference's or is within tolerance(dtype) * its scale; stops
/// at the first entry that is not.
inline void expect_close(const HostTensor& out, const Reference& ref, DType dtype,
                         const std::string& what) {
  ASSERT_EQ(out.shape, ref.shape) << what;
  ASSERT_EQ(out.values.size(), ref.values.size()) << what;
  for (std::size_t i = 0; i < ref.values.size(); ++i) {
    if (out.values[i] == ref.values[i]) continue;  // also covers an all-padding max of -inf
    ASSERT_LE(std::abs(out.values[i] - ref.values[i]), tolerance(dtype) * ref.scale[i])
        << "entry " << i << " of " << ref.shape.to_string() << ": got " << out.values[i]
        << ", want " << ref.values[i] << " (" << what << ")";
  }
}

}  // namespace axle::testing
