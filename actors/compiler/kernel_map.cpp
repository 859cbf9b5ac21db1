// actors: the op-to-kernel map.
#include "axle/actors/compiler/kernel_map.h"

#include <fmt/format.h>

#include <stdexcept>

namespace axle {

Kernel kernel_for(Op op) {
  switch (op) {
#define AXLE_LOWER_OP(name, str, family) \
  case Op::k##name:                      \
    return Kernel::k##name;
#define AXLE_NO_KERNEL(name, str, family)
    AXLE_IR_OPS(AXLE_LOWER_OP, AXLE_NO_KERNEL)
#undef AXLE_NO_KERNEL
#undef AXLE_LOWER_OP
#define AXLE_LOWER_FLOAT_FUNCTION(name, str) \
  case Op::k##name:                          \
    return Kernel::k##name;
    AXLE_FLOAT_FUNCTIONS(AXLE_LOWER_FLOAT_FUNCTION)
#undef AXLE_LOWER_FLOAT_FUNCTION
    case Op::kReshape:
      return Kernel::kCopy;
    case Op::kConstant:
      return Kernel::kFill;
    default:
      throw std::logic_error(fmt::format("op {} has no kernel", op_name(op)));
  }
}

}  // namespace axle
