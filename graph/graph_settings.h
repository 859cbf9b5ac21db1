// graph: the settings of tracing and IR dumps, declared beside the code they steer (engine's
// config.h holds the lookups; a *_settings.cpp file is where a part reads its variables).
#pragma once

namespace axle::config {

/// How ops store values (graph/ops): read on first use and by ops::reload_dtype_config.
struct DTypeSettings {
  /// XLA_USE_BF16, default 0: f32 and f64 tensors are stored as bf16 on the device; tensors
  /// still report their logical dtype.
  bool use_bf16 = false;
  /// XLA_DOWNCAST_BF16, default 0: f32 tensors are stored as bf16 and f64 ones as f32.
  bool downcast_bf16 = false;
  /// XLA_NO_SPECIAL_SCALARS, default 0: the scalars 0 and 1 become graph parameters too,
  /// instead of constants.
  bool no_special_scalars = false;
};

/// IR dumps (graph/dump.h): read by every dump.
struct IrDumpSettings {
  /// XLA_IR_DEBUG, default 0: dumps name the source line that created each node.
  bool source_lines = false;
};

/// Reads the DTypeSettings; throws ConfigError naming the variable and its value.
[[nodiscard]] DTypeSettings read_dtype_settings();
/// Reads the IrDumpSettings.
[[nodiscard]] IrDumpSettings read_ir_dump_settings();

}  // namespace axle::config
