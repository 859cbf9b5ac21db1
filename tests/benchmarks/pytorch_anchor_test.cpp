// benchmarks/pytorch_anchor.h: axle's step against PyTorch's in turn, with a stand-in for the
// Python that runs PyTorch (a shell script printing the script's JSON line from a list).
#include "benchmarks/pytorch_anchor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/benchmarks/bench_lines.h"

namespace axle::bench {
namespace {

// An executable stand-in for `python SCRIPT --model ...`: the n-th call prints values[n] as the
// script's JSON line (or exits 1 from the call past the list's end).
std::string fake_python(const std::filesystem::path& dir, const std::vector<double>& values) {
  const std::filesystem::path counter = dir / "calls", script = dir / "python";
  std::ofstream(counter) << 0;
  std::ofstream out(script);
  out << "#!/bin/sh\nn=$(cat '" << counter.string() << "')\necho $((n + 1)) > '" << counter.string()
      << "'\ncase $n in\n";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out << i << ") echo '{\"bench\": \"train_step_pytorch\", \"value\": " << values[i]
        << ", \"torch\": \"1.13\", \"openblas_coretype\": \"SkylakeX\"}' ;;\n";
  }
  out << "*) exit 1 ;;\nesac\n";
  out.close();
  ::chmod(script.c_str(), 0755);
  return script.string();
}

struct Measured {
  double axle_ms;
  std::map<std::string, std::vector<double>> figures;
  std::string printed;
};

Measured run(const PytorchRuns& runs, std::vector<double> axle_times, int* axle_calls) {
  std::size_t next = 0;
  ::testing::internal::CaptureStdout();
  const double ms = versus_pytorch(runs, {"mlp", 128, 20, 5, "none"}, [&] {
    ++*axle_calls;
    return axle_times.at(next++);
  });
  const std::string printed = ::testing::internal::GetCapturedStdout();
  return {ms, testing::bench_figures(printed, "train_step"), printed};
}

class PytorchAnchor : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("axle_pytorch_anchor_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(PytorchAnchor, RepeatsInTurnAndTakesTheMedianOfThePairsRatios) {
  int calls = 0;
  // Pairs (axle, PyTorch): (5, 10), (10, 30), (4, 20): ratios 2, 3, 5. The median ratio (3) is
  // not the ratio of the medians (20 / 5 = 4): a drift within a pair cancels.
  Measured r = run({fake_python(dir_, {10, 30, 20}), 3}, {5, 10, 4}, &calls);
  EXPECT_EQ(calls, 3);
  EXPECT_DOUBLE_EQ(r.axle_ms, 5);
  ASSERT_EQ(r.figures["pytorch_step_ms"].size(), 1u) << r.printed;
  EXPECT_DOUBLE_EQ(r.figures["pytorch_step_ms"][0], 20);
  EXPECT_DOUBLE_EQ(r.figures["over_pytorch"].at(0), 3);
  EXPECT_NE(r.printed.find("\"pairs\":3"), std::string::npos) << r.printed;
  EXPECT_NE(r.printed.find("\"openblas_coretype\":\"SkylakeX\""), std::string::npos) << r.printed;
}

TEST_F(PytorchAnchor, AFailingRunEndsThePairsWithTheFiguresSoFar) {
  int calls = 0;
  // The stand-in answers once, then fails: one pair, and axle is measured no more.
  Measured r = run({fake_python(dir_, {12}), 3}, {6, 100, 100}, &calls);
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(r.figures["over_pytorch"].at(0), 2);
  EXPECT_NE(r.printed.find("\"pairs\":1"), std::string::npos) << r.printed;
}

TEST_F(PytorchAnchor, WithoutPythonAxleIsMeasuredOnceAndNothingIsCompared) {
  int calls = 0;
  Measured r = run({"", 3}, {7, 100, 100}, &calls);
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(r.axle_ms, 7);
  EXPECT_TRUE(r.figures.empty()) << r.printed;
}

TEST_F(PytorchAnchor, AScriptThatPrintsNoFigureGivesNothing) {
  int calls = 0;
  Measured r = run({fake_python(dir_, {}), 2}, {3, 100}, &calls);
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(r.axle_ms, 3);
  EXPECT_TRUE(r.figures.empty()) << r.printed;
}

}  // namespace
}  // namespace axle::bench
