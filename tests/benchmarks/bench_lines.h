// The benchmarks' tests: a run's JSON lines read back, by metric.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace axle::testing {

/// Each metric's values in `output`'s JSON lines, in the order printed; a line that is not a JSON
/// object, or of another bench than `bench`, is a test failure.
inline std::map<std::string, std::vector<double>> bench_figures(const std::string& output,
                                                                const std::string& bench) {
  std::map<std::string, std::vector<double>> figures;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) {
      ADD_FAILURE() << "not a JSON object: " << line;
      continue;
    }
    EXPECT_EQ(j["bench"], bench) << line;
    figures[j["metric"].get<std::string>()].push_back(j["value"].get<double>());
  }
  return figures;
}

}  // namespace axle::testing
