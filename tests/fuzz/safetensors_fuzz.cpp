// tests/fuzz: safetensors files (graph/formats/safetensors.h) through load_safetensors and
// load_safetensors_metadata. A damaged file must throw FileError and nothing else.
#include <cstddef>
#include <cstdint>

#include "axle/graph/formats/error.h"
#include "axle/graph/formats/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static axle::fuzz::ScratchFile file(".safetensors");
  const auto& path = file.write(data, size);
  bool loaded = false;
  try {
    const axle::CpuTensorMap tensors = axle::load_safetensors(path);
    loaded = true;
    for (const auto& [name, tensor] : tensors) {
      const int64_t numel = tensor.shape.numel();
      axle::fuzz::check(
          tensor.bytes.size() == static_cast<std::size_t>(numel) * axle::dtype_size(tensor.dtype),
          "a tensor's bytes fill its shape");
    }
  } catch (const axle::FileError&) {
  }
  try {
    (void)axle::load_safetensors_metadata(path);
  } catch (const axle::FileError&) {
    axle::fuzz::check(!loaded, "the metadata of a file that loads reads too");
  }
  return 0;
}
