// actors: per-step reports.
#include "axle/actors/host/step_reports.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "axle/actors/runtime/step_breakdown.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"

namespace axle {

StepReports::StepReports(StepReportSettings settings) : settings_(std::move(settings)) {
  if (settings_.analysis) analysis_ = std::make_unique<MetricsAnalysis>();
}

StepReports::~StepReports() {
  if (analysis_) fmt::print(stderr, "{}", analysis_->look());
}

void StepReports::after_step() {
  if (analysis_) {
    const std::string lines = analysis_->step(settings_.analysis_steps);
    if (!lines.empty()) fmt::print(stderr, "{}", lines);
  }
  if (!settings_.metrics_file.empty()) {
    std::lock_guard lock(file_mutex_);
    std::ofstream out(settings_.metrics_file, std::ios::app);
    out << fmt::format("Step {}\n{}Step Breakdown\n{}\n", ++file_steps_, metrics_report(),
                       detail::metrics_file_step_report());
    if (!out) AXLE_LOG(WARNING, "could not append to XLA_METRICS_FILE={}", settings_.metrics_file);
  }
}

}  // namespace axle
