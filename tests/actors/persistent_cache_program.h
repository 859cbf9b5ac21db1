// The step that the persistent compile cache tests and their second process both run: one graph
// with two inputs (x donated: no tensor holds it), a scalar parameter, a constant and two
// outputs.
#pragma once

#include <vector>

#include "axle/axle.h"

namespace axle::small_program {

struct Values {
  std::vector<float> activations;  // relu(x @ w * 0.5 - 1), 2 x 2
  std::vector<float> row_sums;     // its sums over dim 1
  friend bool operator==(const Values&, const Values&) = default;
};

inline Values run() {
  Tensor w = tensor(std::vector<float>{1, 0, 0, 1, 1, 1}, Shape{3, 2});
  Tensor activations =
      relu(matmul(tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}), w) * 0.5 - 1.0);
  Tensor row_sums = sum(activations, {1});
  mark_step();
  return {activations.to_vector<float>(), row_sums.to_vector<float>()};
}

inline const Values kExpected{{1, 1.5, 4, 4.5}, {2.5, 8.5}};

}  // namespace axle::small_program
