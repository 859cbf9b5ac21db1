// round_to: a double as a tensor of `dtype` holds it, for references that must see what the
// device holds. Through engine/element.h's store and load, whose every dtype the Element tests
// check against the compiler's own types (_Float16, the integer conversions).
#pragma once

#include <cstddef>

#include "axle/engine/dtype.h"
#include "axle/engine/element.h"

namespace axle::testing {

inline double round_to(DType dtype, double v) {
  alignas(8) std::byte element[8];
  store_element(dtype, v, element);
  return load_element(dtype, element);
}

}  // namespace axle::testing
