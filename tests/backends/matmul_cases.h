// The products the tests of kMatmul's folded operands run over (cpu_linalg_test.cpp,
// cpu_matmul_epilogue_test.cpp).
#pragma once

#include <vector>

#include "axle/engine/shape.h"

namespace axle::testing {

// (a shape, b shape, transpose_a, transpose_b): one product; products with k over one depth
// block (256); batches folded into rows and separate per-entry products; enough multiply-adds
// to split over two threads.
struct BiasCase {
  Shape a, b;
  bool ta, tb;
};
inline const std::vector<BiasCase> kBiasCases = {
    {{5, 37}, {37, 21}, false, false},         {{3, 40, 300}, {300, 45}, false, false},
    {{2, 33, 70}, {21, 33}, true, true},       {{4, 64, 300}, {70, 300}, false, true},
    {{2, 300, 40}, {2, 300, 35}, true, false},
};

// The output's shape: the batch dims broadcast from the right, then [m, n].
inline Shape product_shape(const BiasCase& c) {
  const int ra = c.a.rank(), rb = c.b.rank();
  const int batch = (ra > rb ? ra : rb) - 2;
  Shape out;
  for (int i = 0; i < batch; ++i) {
    const int ia = i - (batch - (ra - 2)), ib = i - (batch - (rb - 2));
    const int64_t da = ia >= 0 ? c.a[ia] : 1, db = ib >= 0 ? c.b[ib] : 1;
    out.push_back(da == 1 ? db : da);
  }
  out.push_back(c.ta ? c.a[ra - 1] : c.a[ra - 2]);
  out.push_back(c.tb ? c.b[rb - 2] : c.b[rb - 1]);
  return out;
}

}  // namespace axle::testing
