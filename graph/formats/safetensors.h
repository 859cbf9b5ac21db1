// graph/formats: the safetensors format (Hugging Face), to exchange named tensors with PyTorch, JAX
// and the Hugging Face hub. A file is an 8-byte little-endian header length N, N bytes of JSON
// header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the tensors' little-endian row-major bytes, offsets counted from the end of the header.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "axle/engine/dtype.h"
#include "axle/graph/tensor.h"

namespace axle {

/// Host tensors by name (a state dict).
using CpuTensorMap = std::map<std::string, CpuTensor>;
/// Free-form string pairs a safetensors file carries beside its tensors ("__metadata__").
using SafetensorsMetadata = std::map<std::string, std::string>;

/// Writes `tensors` (and `metadata`, when not empty) to `path` as safetensors, atomically: the
/// file is complete or untouched. The layout is the reference implementation's (tensors by
/// falling dtype rank then name, header padded to 8 bytes), so each tensor is aligned to its
/// element size and the bytes match what Python's safetensors writes for the same tensors.
/// Throws std::invalid_argument naming the key when a tensor's byte count does not match its
/// shape and dtype or the key is "__metadata__"; FileError when the file cannot be written.
void save_safetensors(const std::filesystem::path& path, const CpuTensorMap& tensors,
                      const SafetensorsMetadata& metadata = {});

/// Reads every tensor of the safetensors file at `path`. Throws FileError naming the file (and
/// the key, where one is at fault) when the file is missing, truncated, has a header length
/// beyond its end, a header that is not a JSON object, an entry without a valid dtype, shape or
/// data_offsets, a dtype axle has no type for, offsets out of range, overlapping, leaving holes,
/// or not matching shape x dtype size. Nothing is returned from a damaged file.
[[nodiscard]] CpuTensorMap load_safetensors(const std::filesystem::path& path);

/// The "__metadata__" of the safetensors file at `path` (empty when it has none), reading only
/// the header; checks the header as load_safetensors does.
[[nodiscard]] SafetensorsMetadata load_safetensors_metadata(const std::filesystem::path& path);

/// The safetensors name of `dtype`: "F32", "F64", "BF16", "F16", "I64", "I32", "I16", "I8", "U8",
/// "BOOL".
[[nodiscard]] std::string_view safetensors_dtype_name(DType dtype) noexcept;
/// The axle dtype named `name` in safetensors, if axle has it.
[[nodiscard]] std::optional<DType> dtype_from_safetensors_name(std::string_view name) noexcept;

}  // namespace axle
