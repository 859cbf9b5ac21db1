// backends/cpu: fused elementwise kernels (kFused). A chain of elementwise steps runs over the
// output a block at a time, so its intermediates live in a few L1-sized scratch buffers instead
// of making a round trip through memory per op. Each step computes exactly what the unfused
// kernel computes (the same scalar code or the same Eigen expressions, over blocks that start on
// the same vector boundaries), so fusing never changes a result's bits.
#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backends/cpu/float_math.h"
#include "backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

struct Step {
  Kernel kernel;
  int32_t destination;  // scratch buffer, or -1 for the output
  int32_t a;            // >= 0 external operand, < 0 scratch buffer -a - 1
  int32_t b;
  bool tanh_form;  // gelu's approximate flag
};

[[noreturn]] void malformed(const std::string& what) {
  throw std::invalid_argument("fused: " + what);
}

// Reads and checks the step list (a program from disk or a bug must not index out of bounds).
std::vector<Step> parse_steps(const KernelArgs& args, int32_t& buffers) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() < 6 || (ints.size() - 1) % 5 != 0) {
    malformed(fmt::format("ints must be [buffers, 5 per step], got {} values", ints.size()));
  }
  if (ints[0] < 0 || ints[0] > 1024) malformed(fmt::format("{} scratch buffers", ints[0]));
  buffers = static_cast<int32_t>(ints[0]);
  const auto inputs = static_cast<int64_t>(args.inputs.size());
  auto check_operand = [&](int64_t operand, std::size_t step) {
    if (operand >= inputs || operand < -static_cast<int64_t>(buffers)) {
      malformed(fmt::format("step {} reads operand {} ({} inputs, {} buffers)", step, operand,
                            inputs, buffers));
    }
  };
  const std::size_t count = (ints.size() - 1) / 5;
  std::vector<Step> steps;
  steps.reserve(count);
  for (std::size_t s = 0; s < count; ++s) {
    const int64_t* f = ints.data() + 1 + 5 * s;
    if (f[0] < 0 || f[0] >= static_cast<int64_t>(Kernel::kCount)) {
      malformed(fmt::format("step {} has kernel number {}", s, f[0]));
    }
    const auto kernel = static_cast<Kernel>(f[0]);
    const int arity = fused_step_arity(kernel);
    const bool binary = arity == 2;
    if (arity == 0) {
      malformed(
          fmt::format("step {}: {} is not a fusible elementwise kernel", s, kernel_name(kernel)));
    }
    const bool last = s + 1 == count;
    if (last ? f[1] != -1 : (f[1] < 0 || f[1] >= buffers)) {
      malformed(fmt::format("step {} writes {} (scratch buffers 0..{}; the last step writes -1)", s,
                            f[1], buffers - 1));
    }
    check_operand(f[2], s);
    if (binary) check_operand(f[3], s);
    steps.push_back({kernel, static_cast<int32_t>(f[1]), static_cast<int32_t>(f[2]),
                     binary ? static_cast<int32_t>(f[3]) : 0, f[4] != 0});
  }
  return steps;
}

// dst[i] = op(a[i], b[i]) in fixed groups of 16, each computed into a local array before it is
// stored: GCC at -O2 vectorises only loops whose trip count it knows and that cannot alias, and
// dst may be a or b here (steps write in place).
template <class T, class Op>
void binary_elementwise(const T* a, const T* b, T* dst, int64_t len, Op op) {
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= len; i += kGroup) {
    T result[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) result[j] = op(a[i + j], b[i + j]);
    for (int64_t j = 0; j < kGroup; ++j) dst[i + j] = result[j];
  }
  for (; i < len; ++i) dst[i] = op(a[i], b[i]);
}

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

template <class T>
class FusedRun {
 public:
  static constexpr int64_t kBlock = 4096 / sizeof(T);  // a multiple of every vector width
  // Scratch blocks sit a cache line more than a block apart: at exactly 4 KiB apart, a step
  // reading one block and writing another would hit the same 4 KiB offsets, which the CPU
  // mistakes for a store it must forward (4K aliasing) on every access.
  static constexpr int64_t kStride = kBlock + 64 / sizeof(T);

  FusedRun(const KernelArgs& args, std::vector<Step> steps, int32_t buffers)
      : args_(args), steps_(std::move(steps)), out_(args.output.desc->shape) {
    const std::size_t external = args.inputs.size();
    // Scratch: one block per buffer, one per broadcast operand; 64-byte aligned, so blocks
    // start on the same vector boundaries as the unfused kernels' (whose buffers are too).
    std::size_t blocks = static_cast<std::size_t>(buffers);
    kinds_.resize(external);
    strides_.resize(external);
    slot_of_.resize(external);
    for (std::size_t e = 0; e < external; ++e) {
      const BufferDesc& desc = *args.inputs[e].desc;
      if (desc.dtype != args.output.desc->dtype) {
        malformed(fmt::format("operand {} is {}, the output {}", e, dtype_name(desc.dtype),
                              dtype_name(args.output.desc->dtype)));
      }
      if (!broadcasts_to(desc.shape, out_)) {
        malformed(fmt::format("operand {} {} does not broadcast to {}", e, desc.shape.to_string(),
                              out_.to_string()));
      }
      if (desc.shape == out_) {
        kinds_[e] = Kind::kSame;
      } else if (desc.shape.numel() == 1) {
        kinds_[e] = Kind::kSplat;
        slot_of_[e] = blocks++;
      } else {
        kinds_[e] = Kind::kGather;
        strides_[e] = broadcast_strides(desc.shape, out_);
        slot_of_[e] = blocks++;
      }
    }
    scratch_.reset(static_cast<T*>(
        std::aligned_alloc(64, std::max<std::size_t>(1, blocks) * kStride * sizeof(T))));
    if (!scratch_) throw std::bad_alloc();
    for (std::size_t e = 0; e < external; ++e) {
      if (kinds_[e] == Kind::kSplat) {
        std::fill_n(block(slot_of_[e]), kBlock, args.inputs[e].as<T>()[0]);
      }
    }
  }

  void run() {
    const int64_t n = out_.numel();
    T* out = args_.output.as<T>();
    std::vector<const T*> operand(args_.inputs.size());
    for (int64_t start = 0; start < n; start += kBlock) {
      const int64_t len = std::min(kBlock, n - start);
      for (std::size_t e = 0; e < operand.size(); ++e) operand[e] = read(e, start, len);
      for (const Step& step : steps_) {
        T* dst = step.destination < 0 ? out + start : block(step.destination);
        const T* a = step.a >= 0 ? operand[step.a] : block(-step.a - 1);
        const T* b = step.b >= 0 ? operand[step.b] : block(-step.b - 1);
        apply(step, a, b, dst, len);
      }
    }
  }

 private:
  enum class Kind : uint8_t { kSame, kSplat, kGather };

  T* block(std::size_t i) { return scratch_.get() + i * kStride; }

  // Operand e's values for output elements [start, start + len), contiguous.
  const T* read(std::size_t e, int64_t start, int64_t len) {
    const T* data = args_.inputs[e].as<T>();
    switch (kinds_[e]) {
      case Kind::kSame:
        return data + start;
      case Kind::kSplat:
        return block(slot_of_[e]);
      case Kind::kGather:
        break;
    }
    const std::array<int64_t, Shape::kMaxRank>& strides = strides_[e];
    const int rank = out_.rank();
    int64_t index[Shape::kMaxRank];
    int64_t offset = 0;
    int64_t rest = start;
    for (int d = rank - 1; d >= 0; --d) {
      index[d] = rest % out_[d];
      rest /= out_[d];
      offset += index[d] * strides[static_cast<std::size_t>(d)];
    }
    T* buffer = block(slot_of_[e]);
    for (int64_t i = 0; i < len; ++i) {
      buffer[i] = data[offset];
      for (int d = rank - 1; d >= 0; --d) {  // next output index, carrying into outer dims
        const auto sd = static_cast<std::size_t>(d);
        offset += strides[sd];
        if (++index[d] < out_[d]) break;
        offset -= index[d] * strides[sd];
        index[d] = 0;
      }
    }
    return buffer;
  }

  static void apply(const Step& step, const T* a, const T* b, T* dst, int64_t len) {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Map<const Array> x(a, len);
    const Eigen::Map<const Array> y(b, len);
    Eigen::Map<Array> o(dst, len);
    switch (step.kernel) {
      case Kernel::kAdd:
        o = x + y;
        return;
      case Kernel::kSub:
        o = x - y;
        return;
      case Kernel::kMul:
        o = x * y;
        return;
      case Kernel::kDiv:
        o = x / y;
        return;
      case Kernel::kPow:
        for (int64_t i = 0; i < len; ++i) dst[i] = std::pow(a[i], b[i]);
        return;
      case Kernel::kMaximum:
        // NaN propagates, as in the unfused kernel.
        binary_elementwise(a, b, dst, len, [](T p, T q) { return (p > q || p != p) ? p : q; });

        return;
      case Kernel::kMinimum:
        binary_elementwise(a, b, dst, len, [](T p, T q) { return (p < q || p != p) ? p : q; });
        return;
      case Kernel::kNeg:
        o = -x;
        return;
      case Kernel::kAbs:
        o = x.abs();
        return;
      case Kernel::kRelu:
        binary_elementwise(a, a, dst, len, [](T p, T) { return p < T(0) ? T(0) : p; });
        return;
      case Kernel::kExp:
        o = transcendental<Kernel::kExp>(x);
        return;
      case Kernel::kLog:
        o = transcendental<Kernel::kLog>(x);
        return;
      case Kernel::kSqrt:
        o = transcendental<Kernel::kSqrt>(x);
        return;
      case Kernel::kRsqrt:
        o = transcendental<Kernel::kRsqrt>(x);
        return;
      case Kernel::kTanh:
        o = transcendental<Kernel::kTanh>(x);
        return;
      case Kernel::kSigmoid:
        o = transcendental<Kernel::kSigmoid>(x);
        return;
      case Kernel::kGelu:
        if (step.tanh_form) {
          o = gelu_tanh(x);
        } else {
          o = gelu_erf(x);
        }
        return;
      default:
        malformed(fmt::format("{} is not fusible", kernel_name(step.kernel)));
    }
  }

  const KernelArgs& args_;
  std::vector<Step> steps_;
  const Shape& out_;
  std::vector<Kind> kinds_;
  std::vector<std::array<int64_t, Shape::kMaxRank>> strides_;
  std::vector<std::size_t> slot_of_;  // scratch block of each splat or gathered operand
  std::unique_ptr<T[], FreeDeleter> scratch_;
};

void fused_kernel(const KernelArgs& args) {
  int32_t buffers = 0;
  std::vector<Step> steps = parse_steps(args, buffers);
  switch (args.output.desc->dtype) {
    case DType::kF32:
      FusedRun<float>(args, std::move(steps), buffers).run();
      return;
    case DType::kF64:
      FusedRun<double>(args, std::move(steps), buffers).run();
      return;
    default:
      malformed(fmt::format("{} output (f32 and f64 fuse)", dtype_name(args.output.desc->dtype)));
  }
}

}  // namespace

void register_fused_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kFused, &fused_kernel);
}

}  // namespace axle::cpu
