// graph: reading how ops store values and what IR dumps show.
#include "axle/graph/graph_settings.h"

#include "axle/engine/config.h"

namespace axle::config {

DTypeSettings read_dtype_settings() {
  const DTypeSettings defaults;
  return {.use_bf16 = get_bool("XLA_USE_BF16", defaults.use_bf16),
          .downcast_bf16 = get_bool("XLA_DOWNCAST_BF16", defaults.downcast_bf16),
          .no_special_scalars = get_bool("XLA_NO_SPECIAL_SCALARS", defaults.no_special_scalars)};
}

IrDumpSettings read_ir_dump_settings() {
  return {.source_lines = get_bool("XLA_IR_DEBUG", IrDumpSettings{}.source_lines)};
}

}  // namespace axle::config
