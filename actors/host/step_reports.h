// actors: what the process reports after each step — PT_XLA_DEBUG_LEVEL's auto-metrics analysis
// (every AXLE_METRICS_ANALYSIS_STEPS steps, and once more at shutdown) and XLA_METRICS_FILE
// (the metrics report and the step breakdown appended after every step). One per process, fed
// by every replica's steps.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "axle/actors/compiler/debug_analysis.h"

namespace axle {

struct StepReportSettings {
  bool analysis = false;         ///< PT_XLA_DEBUG_LEVEL >= 1
  int64_t analysis_steps = 100;  ///< AXLE_METRICS_ANALYSIS_STEPS
  std::string metrics_file;      ///< XLA_METRICS_FILE; empty: none
};

class StepReports {
 public:
  explicit StepReports(StepReportSettings settings);
  /// Prints the analysis of the steps since its last look.
  ~StepReports();
  StepReports(const StepReports&) = delete;
  StepReports& operator=(const StepReports&) = delete;

  /// After a replica's step.
  void after_step();

 private:
  StepReportSettings settings_;
  std::unique_ptr<MetricsAnalysis> analysis_;
  std::mutex file_mutex_;
  int64_t file_steps_ = 0;
};

}  // namespace axle
