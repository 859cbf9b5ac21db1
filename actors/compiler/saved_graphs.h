// actors: XLA_SAVE_TENSORS_FILE — the graph of every sync appended to one file, as text, as
// Graphviz dot or as the program the compiler makes of it (XLA_SAVE_TENSORS_FMT=text|dot|hlo),
// headed by why it ran. One per process, shared by every replica.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "axle/actors/compiler/compiler_settings.h"
#include "axle/graph/tensor.h"

namespace axle {

class SavedGraphs {
 public:
  /// Appends to `path` (nothing when empty) in `format`.
  SavedGraphs(std::string path, config::SaveTensorsFormat format);

  [[nodiscard]] bool enabled() const noexcept { return !path_.empty(); }
  /// Appends the pending graph of `tensors`, headed by `[reason]`.
  void append(const std::vector<Tensor>& tensors, std::string_view reason);

 private:
  std::string path_;
  config::SaveTensorsFormat format_;
  std::mutex mutex_;
};

}  // namespace axle
