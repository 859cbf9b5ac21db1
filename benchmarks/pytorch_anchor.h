// benchmarks: PyTorch eager as train_step_bench's anchor: its step of a model run by
// benchmarks/pytorch_step.py (the script's path is AXLE_PYTORCH_STEP_SCRIPT, defined for
// train_step_bench), and axle's step measured against it in turn.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/report.h"

namespace axle::bench {

/// With which Python to run PyTorch (none: no comparison) and how many times in turn.
struct PytorchRuns {
  std::string python;
  int repeat = 1;
};

/// The model and the step counts PyTorch's script measures, in precision `amp` (none or bf16).
struct PytorchCase {
  const char* model;
  int64_t batch;
  int steps, rounds;
  std::string amp;
};

// PyTorch eager's median ms per step of `model` (benchmarks/pytorch_step.py under `python`), or
// nothing when the script fails or prints no figure (PyTorch not installed): said on stderr.
struct PytorchStep {
  double ms = 0;
  std::string version, openblas_coretype;
};
inline std::optional<PytorchStep> pytorch_step_ms(const std::string& python,
                                                  const std::string& model, int steps, int rounds,
                                                  const std::string& amp) {
  const std::string command =
      fmt::format("'{}' '{}' --model {} --steps {} --rounds {} --amp {}", python,
                  AXLE_PYTORCH_STEP_SCRIPT, model, steps, rounds, amp);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    std::fprintf(stderr, "train_step_bench: could not run %s\n", command.c_str());
    return std::nullopt;
  }
  std::string out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  const int status = ::pclose(pipe);
  const auto json = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (status != 0 || json.is_discarded() || !json.contains("value")) {
    std::fprintf(stderr, "train_step_bench: %s gave no step time (exit status %d)\n",
                 command.c_str(), status);
    return std::nullopt;
  }
  return PytorchStep{json["value"].get<double>(), json.value("torch", ""),
                     json.value("openblas_coretype", "")};
}

// axle's step time from `axle_step`, and with --pytorch PyTorch's step of the same model in the
// same precision right after it, --repeat times in turn: a machine whose speed drifts moves both
// figures of a pair alike, so over_pytorch is the median of the pairs' ratios. Returns the median
// of axle's times.
template <class AxleStep>
double versus_pytorch(const PytorchRuns& o, const PytorchCase& c, AxleStep&& axle_step) {
  const auto& [model, batch, steps, rounds, amp] = c;
  std::vector<double> ours, theirs, ratios;
  std::optional<PytorchStep> last;
  for (int r = 0; r < (o.python.empty() ? 1 : o.repeat); ++r) {
    ours.push_back(axle_step());
    if (o.python.empty()) break;
    std::optional<PytorchStep> theirs_now = pytorch_step_ms(o.python, model, steps, rounds, amp);
    if (!theirs_now) break;
    last = theirs_now;
    theirs.push_back(last->ms);
    ratios.push_back(last->ms / ours.back());
  }
  if (!theirs.empty()) {
    emit("train_step", "pytorch_step_ms", quantile(theirs, 0.5), "ms",
         {{"model", std::string(model)},
          {"batch", batch},
          {"amp", amp},
          {"torch", last ? last->version : std::string()},
          {"openblas_coretype", last ? last->openblas_coretype : std::string()},
          {"pairs", static_cast<int64_t>(theirs.size())}});
    emit("train_step", "over_pytorch", quantile(ratios, 0.5), "ratio",
         {{"model", std::string(model)},
          {"batch", batch},
          {"amp", amp},
          {"pairs", static_cast<int64_t>(ratios.size())}});
  }
  return quantile(ours, 0.5);
}

}  // namespace axle::bench
