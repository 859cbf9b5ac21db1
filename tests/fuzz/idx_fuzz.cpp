// tests/fuzz: IDX files (graph/formats/idx.h), gzip-compressed or plain, through read_idx_array and
// the conversion to a tensor. A damaged file must throw FileError and nothing else.
#include <cstddef>
#include <cstdint>

#include "axle/graph/formats/error.h"
#include "axle/graph/formats/idx.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static axle::fuzz::ScratchFile file(".idx");
  const auto& path = file.write(data, size);
  try {
    const axle::IdxArray array = axle::read_idx_array(path);
    const int64_t numel = array.shape.numel();
    axle::fuzz::check(
        array.bytes.size() == static_cast<std::size_t>(numel) * axle::idx_type_size(array.type),
        "the elements fill the shape");
    const axle::CpuTensor tensor = axle::read_idx(path);
    axle::fuzz::check(tensor.shape == array.shape, "read_idx keeps the shape");
    axle::fuzz::check(
        tensor.bytes.size() == static_cast<std::size_t>(numel) * axle::dtype_size(tensor.dtype),
        "the tensor's bytes fill its shape");
  } catch (const axle::FileError&) {
  }
  return 0;
}
