// graph/formats: writing safetensors files, laid out as the reference implementation lays them out.
#include "axle/graph/formats/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "axle/graph/formats/atomic_file.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

// CpuTensor bytes go to the file as they are: little endian on a little-endian host.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little endian");

// The position of `dtype` in the reference implementation's Dtype enum, which orders tensors in
// the files it writes (falling rank, then name). It rises with the element size, which is what
// keeps every tensor aligned.
int reference_rank(DType dtype) noexcept {
  switch (dtype) {
    case DType::kBool:
      return 0;
    case DType::kBFloat16:
      return 8;
    case DType::kInt32:
      return 9;
    case DType::kFloat32:
      return 11;
    case DType::kFloat64:
      return 12;
    case DType::kInt64:
      return 13;
    case DType::kUInt8:
      return 1;
    case DType::kInt8:
      return 2;
    case DType::kInt16:
      return 5;
    case DType::kFloat16:
      return 7;
  }
  return 0;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBool:
      return "BOOL";
    case DType::kFloat16:
      return "F16";
    case DType::kInt8:
      return "I8";
    case DType::kUInt8:
      return "U8";
    case DType::kInt16:
      return "I16";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) noexcept {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto dtype = static_cast<DType>(i);
    if (safetensors_dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}
void save_safetensors(const fs::path& path, const CpuTensorMap& tensors,
                      const SafetensorsMetadata& metadata) {
  std::vector<const CpuTensorMap::value_type*> order;
  order.reserve(tensors.size());
  for (const auto& item : tensors) {
    const auto& [name, t] = item;
    if (name == "__metadata__") {
      throw std::invalid_argument(
          "save_safetensors: \"__metadata__\" is the format's metadata key, not a tensor name");
    }
    const uint64_t expected = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (t.bytes.size() != expected) {
      throw std::invalid_argument(
          fmt::format("save_safetensors: tensor \"{}\" holds {} bytes but shape {} of {} needs {}",
                      name, t.bytes.size(), t.shape.to_string(), dtype_name(t.dtype), expected));
    }
    order.push_back(&item);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return reference_rank(a->second.dtype) > reference_rank(b->second.dtype);
  });  // stable: equal ranks keep the map's name order

  // ordered_json writes keys in insertion order, as the reference implementation does:
  // "__metadata__" first, then the tensors in data order, each as dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto* item : order) {
    const CpuTensor& t = item->second;
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(safetensors_dtype_name(t.dtype));
    entry["shape"] = nlohmann::ordered_json::array();
    for (int64_t d : t.shape.dims()) entry["shape"].push_back(d);
    entry["data_offsets"] = {offset, offset + t.bytes.size()};
    offset += t.bytes.size();
    header[item->first] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw std::invalid_argument(fmt::format(
        "save_safetensors: a tensor name or metadata string is not UTF-8: {}", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  std::array<std::byte, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) length[i] = std::byte((text.size() >> (8 * i)) & 0xff);
  AtomicFileWriter out(path);
  out.write(length);
  out.write(text);
  for (const auto* item : order) out.write(item->second.bytes);
  out.commit();
}

}  // namespace axle
