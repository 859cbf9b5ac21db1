// benchmarks: the shared output format. Every figure is one JSON object on stdout —
// {"bench": NAME, "metric": NAME, "value": NUMBER, "unit": UNIT, ...parameters} — and one row of a
// human-readable table on stderr.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace axle::bench {

/// A benchmark parameter value: a number, a string or a flag.
using Param = std::variant<int64_t, double, std::string, bool>;

/// Prints one figure as a JSON line (stdout) and a table row (stderr).
void emit(const std::string& bench, const std::string& metric, double value,
          const std::string& unit, const std::map<std::string, Param>& params = {});

/// The q-quantile (0..1) of `samples` by nearest rank; sorts them.
double quantile(std::vector<double>& samples, double q);

}  // namespace axle::bench
