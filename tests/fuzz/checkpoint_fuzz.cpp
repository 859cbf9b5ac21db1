// tests/fuzz: checkpoint files (graph/formats/checkpoint_codec.h) through CheckpointReader, as
// load() reads them. A damaged file must throw FileError and nothing else.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static axle::fuzz::ScratchFile file(".ckpt");
  const auto& path = file.write(data, size);
  try {
    axle::CheckpointReader in(path);
    uint64_t count = 0;
    while (std::optional<axle::CheckpointEntry> entry = in.next()) {
      const int64_t numel = entry->tensor.shape.numel();
      axle::fuzz::check(entry->tensor.bytes.size() ==
                            static_cast<std::size_t>(numel) * axle::dtype_size(entry->tensor.dtype),
                        "a tensor's bytes fill its shape");
      ++count;
    }
    axle::fuzz::check(count == in.tensor_count(), "as many tensors as the header announces");
  } catch (const axle::FileError&) {
  }
  return 0;
}
