// engine: the severity of a log line, apart from the logger (engine/log.h) so that the settings
// that choose the lowest level written (engine/config.h) sit below the logger that reads them.
#pragma once

namespace axle {

/// Severity of a log line; lines below the configured minimum are dropped.
enum class LogLevel : int {
  kDebug = 0,    ///< "debug" (AXLE_LOG_LEVEL=debug or 0)
  kInfo = 1,     ///< "info" (AXLE_LOG_LEVEL=info or 1)
  kWarning = 2,  ///< "warning", the default minimum (AXLE_LOG_LEVEL=warning, warn or 2)
  kError = 3     ///< "error" (AXLE_LOG_LEVEL=error or 3)
};

}  // namespace axle
