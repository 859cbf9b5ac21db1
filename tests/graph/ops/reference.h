// Test helpers for the graph ops' value tests (tests/graph/ops): reference arrays and the plain
// double-precision loops the ops are checked against (NumPy broadcasting, reductions, softmax,
// permute, gather, matmul). Host code only: nothing here traces or runs an op.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "axle/engine/shape.h"

namespace axle::testing {

using Dims = std::vector<int64_t>;

/// A reference value: row-major doubles and their dims.
struct Ref {
  Dims dims;
  std::vector<double> values;
};

inline int64_t count(const Dims& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

inline Shape shape_of(const Dims& dims) { return Shape(std::span<const int64_t>(dims)); }

// Calls f(index) for every multi-index of `dims`, in row-major order (once for 0-d dims).
template <class F>
void for_each_index(const Dims& dims, F&& f) {
  Dims index(dims.size(), 0);
  for (int64_t n = count(dims); n > 0; --n) {
    f(index);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
}

inline int64_t offset_of(const Dims& dims, const Dims& index) {
  int64_t offset = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) offset = offset * dims[d] + index[d];
  return offset;
}

inline double at(const Ref& x, const Dims& index) { return x.values[offset_of(x.dims, index)]; }

// The element of x that element `index` of a larger result reads under NumPy broadcasting.
inline double broadcast_at(const Ref& x, const Dims& index) {
  const std::size_t lead = index.size() - x.dims.size();
  int64_t offset = 0;
  for (std::size_t d = 0; d < x.dims.size(); ++d) {
    offset = offset * x.dims[d] + (x.dims[d] == 1 ? 0 : index[lead + d]);
  }
  return x.values[offset];
}

inline Dims broadcast_dims(const Dims& a, const Dims& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

template <class F>
Ref map(const Ref& x, F&& f) {
  Ref out{x.dims, {}};
  for (double v : x.values) out.values.push_back(f(v));
  return out;
}

template <class F>
Ref zip(const Ref& a, const Ref& b, F&& f) {
  Ref out{broadcast_dims(a.dims, b.dims), {}};
  for_each_index(out.dims, [&](const Dims& i) {
    out.values.push_back(f(broadcast_at(a, i), broadcast_at(b, i)));
  });
  return out;
}

inline Ref reshaped(const Ref& x, Dims dims) { return Ref{std::move(dims), x.values}; }

// x reduced over `dims` (every dim when empty; negative dims count from the end) by f, which
// gets each group's elements in row-major order.
template <class F>
Ref reduce_ref(const Ref& x, const Dims& dims, bool keepdim, F&& f) {
  const int rank = static_cast<int>(x.dims.size());
  std::vector<bool> reduced(rank, dims.empty());
  if (rank > 0) {  // a 0-d x takes dim 0 or -1, as torch, and has nothing to reduce
    for (int64_t d : dims) reduced[d < 0 ? d + rank : d] = true;
  }
  Ref out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d] || keepdim) out.dims.push_back(reduced[d] ? 1 : x.dims[d]);
  }
  std::vector<std::vector<double>> groups(count(out.dims));
  for_each_index(x.dims, [&](const Dims& i) {
    Dims o;
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d] || keepdim) o.push_back(reduced[d] ? 0 : i[d]);
    }
    groups[offset_of(out.dims, o)].push_back(at(x, i));
  });
  for (const auto& group : groups) out.values.push_back(f(group));
  return out;
}

inline double sum_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}
inline double mean_of(const std::vector<double>& v) {
  return sum_of(v) / static_cast<double>(v.size());
}
inline double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
inline double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

inline Ref softmax_ref(const Ref& x, int64_t dim, bool log) {
  const Ref m = reduce_ref(x, {dim}, true, max_of);
  const Ref shifted = zip(x, m, [](double a, double b) { return a - b; });
  const Ref s = reduce_ref(map(shifted, [](double v) { return std::exp(v); }), {dim}, true, sum_of);
  return zip(shifted, s,
             [log](double d, double t) { return log ? d - std::log(t) : std::exp(d) / t; });
}

inline Ref permute_ref(const Ref& x, const Dims& perm) {
  Ref out;
  for (int64_t p : perm) out.dims.push_back(x.dims[p]);
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i(x.dims.size());
    for (std::size_t k = 0; k < perm.size(); ++k) i[perm[k]] = o[k];
    out.values.push_back(at(x, i));
  });
  return out;
}

inline Ref gather_ref(const Ref& x, int64_t dim, const Ref& index) {
  Ref out{index.dims, {}};
  for_each_index(index.dims, [&](const Dims& o) {
    Dims i = o;
    i[dim] = static_cast<int64_t>(at(index, o));
    out.values.push_back(at(x, i));
  });
  return out;
}

// torch.matmul in double. `scale` receives sum |a_k * b_k| per output element.
inline Ref matmul_ref(const Ref& a, const Ref& b, std::vector<double>& scale) {
  const Ref a2 = a.dims.size() == 1 ? reshaped(a, {1, a.dims[0]}) : a;
  const Ref b2 = b.dims.size() == 1 ? reshaped(b, {b.dims[0], 1}) : b;
  const int64_t m = a2.dims.end()[-2], k = a2.dims.back(), n = b2.dims.back();
  Dims dims = broadcast_dims(Dims(a2.dims.begin(), a2.dims.end() - 2),
                             Dims(b2.dims.begin(), b2.dims.end() - 2));
  dims.push_back(m);
  dims.push_back(n);
  Ref out{{}, {}};
  for_each_index(dims, [&](const Dims& o) {
    Dims ia = o, ib = o;
    double acc = 0, magnitude = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      ia.back() = kk;
      ib.end()[-2] = kk;
      const double term = broadcast_at(a2, ia) * broadcast_at(b2, ib);
      acc += term;
      magnitude += std::abs(term);
    }
    out.values.push_back(acc);
    scale.push_back(magnitude);
  });
  if (a.dims.size() == 1) dims.erase(dims.end() - 2);
  if (b.dims.size() == 1) dims.pop_back();
  out.dims = dims;
  return out;
}

inline Ref constant_ref(Dims dims, double value) {
  return Ref{dims, std::vector<double>(static_cast<std::size_t>(count(dims)), value)};
}

}  // namespace axle::testing
