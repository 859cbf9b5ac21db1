// benchmarks: JSON-lines output shared by every benchmark binary.
#include "benchmarks/report.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace axle::bench {

void emit(const std::string& bench, const std::string& metric, double value,
          const std::string& unit, const std::map<std::string, Param>& params) {
  nlohmann::ordered_json line;
  line["bench"] = bench;
  line["metric"] = metric;
  line["value"] = value;
  line["unit"] = unit;
  std::string described;
  for (const auto& [key, param] : params) {
    std::visit([&, k = key](const auto& v) { line[k] = v; }, param);
    std::visit([&, k = key](const auto& v) { described += fmt::format(" {}={}", k, v); }, param);
  }
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "%-10s %-28s %16.3f %-8s%s\n", bench.c_str(), metric.c_str(), value,
               unit.c_str(), described.c_str());
}

double quantile(std::vector<double>& samples, double q) {
  if (samples.empty()) return NAN;
  std::sort(samples.begin(), samples.end());
  auto rank = static_cast<std::size_t>(q * static_cast<double>(samples.size()));
  return samples[std::min(rank, samples.size() - 1)];
}

}  // namespace axle::bench
