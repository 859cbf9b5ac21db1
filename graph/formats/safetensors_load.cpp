// graph/formats: reading safetensors files. The header is checked whole (types, shapes, offsets
// tiling the data exactly) before any tensor is read, so a damaged file is reported, never
// half-loaded.
#include "axle/graph/formats/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "axle/graph/formats/error.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The format stores little-endian bytes and CpuTensor holds host-order bytes: they are the same
// bytes only on a little-endian host, the only kind axle builds for.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little endian");

// The reference implementation's limit: a larger header is damage or an attack, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor as the header describes it.
struct Entry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by offsets
  SafetensorsMetadata metadata;
  uint64_t data_start = 0;  // file offset of the data section
};

std::string key_error(std::string_view key, std::string_view what) {
  return fmt::format("tensor \"{}\": {}", key, what);
}

Entry parse_entry(const fs::path& path, const std::string& key, const json& value) {
  if (!value.is_object()) {
    throw FileError(path, key_error(key, fmt::format("expected an object with dtype, shape and "
                                                     "data_offsets, got {}",
                                                     value.dump())));
  }
  Entry entry;
  entry.name = key;
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    throw FileError(path, key_error(key, "no \"dtype\" string"));
  }
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  const std::optional<DType> parsed = dtype_from_safetensors_name(dtype_name);
  if (!parsed) {
    throw FileError(path, key_error(key, fmt::format("dtype \"{}\" is not one axle has (F32, F64, "
                                                     "BF16, I32, I64, BOOL)",
                                                     dtype_name)));
  }
  entry.dtype = *parsed;

  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    throw FileError(path, key_error(key, "no \"shape\" array"));
  }
  if (shape->size() > static_cast<std::size_t>(Shape::kMaxRank)) {
    throw FileError(path,
                    key_error(key, fmt::format("shape {} has rank {}; axle supports at most {}",
                                               shape->dump(), shape->size(), Shape::kMaxRank)));
  }
  uint64_t bytes = dtype_size(entry.dtype);
  for (const json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t{INT64_MAX} ||
        __builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes)) {
      throw FileError(path, key_error(key, fmt::format("shape {} is not a list of sizes that fit "
                                                       "in memory",
                                                       shape->dump())));
    }
    entry.shape.push_back(d.get<int64_t>());
  }

  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    throw FileError(path, key_error(key, "no \"data_offsets\" pair of non-negative integers"));
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    throw FileError(path, key_error(key, fmt::format("data_offsets [{},{}] end before they begin",
                                                     entry.begin, entry.end)));
  }
  if (entry.end - entry.begin != bytes) {
    throw FileError(path,
                    key_error(key, fmt::format("data_offsets [{},{}] span {} bytes but "
                                               "shape {} of {} needs {}",
                                               entry.begin, entry.end, entry.end - entry.begin,
                                               shape->dump(), dtype_name, bytes)));
  }
  return entry;
}

SafetensorsMetadata parse_metadata(const fs::path& path, const json& value) {
  SafetensorsMetadata metadata;
  if (!value.is_object()) {
    throw FileError(path, "\"__metadata__\" is not an object of strings");
  }
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) {
      throw FileError(path, fmt::format("\"__metadata__\" entry \"{}\" is not a string", key));
    }
    metadata.emplace(key, text.get<std::string>());
  }
  return metadata;
}

// The header's JSON text, after its 8-byte length.
std::string read_header_text(std::ifstream& in, const fs::path& path, uint64_t file_size) {
  if (file_size < 8) {
    throw FileError(
        path, fmt::format("truncated: {} bytes, fewer than the 8-byte header length", file_size));
  }
  std::array<unsigned char, 8> prefix{};
  in.read(reinterpret_cast<char*>(prefix.data()), 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[static_cast<std::size_t>(i)];
  if (length > file_size - 8) {
    throw FileError(path, fmt::format("header length {} goes beyond the end of the file ({} bytes "
                                      "after the length; truncated?)",
                                      length, file_size - 8));
  }
  if (length > kMaxHeaderBytes) {
    throw FileError(path, fmt::format("header length {} is above the format's limit of {}", length,
                                      kMaxHeaderBytes));
  }
  std::string text(static_cast<std::size_t>(length), '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  if (!in) throw FileError(path, "cannot read the header");
  if (text.empty() || text.front() != '{') {
    throw FileError(path, "header is not a JSON object (it must start with '{')");
  }
  return text;
}

// The header's JSON, with no key twice.
json parse_header(const std::string& text, const fs::path& path) {
  // nlohmann keeps the last of two equal keys; a safetensors header must not have any.
  std::set<std::string> keys;
  std::string duplicate;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event,
                                                json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text, note_keys);
  } catch (const json::exception& e) {
    throw FileError(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!root.is_object()) throw FileError(path, "header is not a JSON object");
  if (!duplicate.empty())
    throw FileError(path, key_error(duplicate, "appears twice in the header"));
  return root;
}

// The tensors must tile the data section exactly: no overlaps, no holes, nothing after.
void check_tiling(const Header& header, const fs::path& path, uint64_t file_size) {
  const uint64_t data_size = file_size - header.data_start;
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : header.entries) {
    if (e.end > data_size) {
      throw FileError(path, key_error(e.name, fmt::format("data_offsets [{},{}] reach beyond the "
                                                          "{} bytes of data in the file "
                                                          "(truncated?)",
                                                          e.begin, e.end, data_size)));
    }
    if (e.begin < covered) {
      throw FileError(path, key_error(e.name, fmt::format("data_offsets [{},{}] overlap those of "
                                                          "\"{}\" [{},{}]",
                                                          e.begin, e.end, previous->name,
                                                          previous->begin, previous->end)));
    }
    if (e.begin > covered) {
      throw FileError(path, key_error(e.name, fmt::format("data_offsets [{},{}] leave bytes "
                                                          "[{},{}) of the data to no tensor",
                                                          e.begin, e.end, covered, e.begin)));
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    throw FileError(path, fmt::format("{} bytes after the last tensor's data belong to no tensor",
                                      data_size - covered));
  }
}

// Reads and checks the header; leaves `in` anywhere.
Header read_header(std::ifstream& in, const fs::path& path, uint64_t file_size) {
  const std::string text = read_header_text(in, path, file_size);
  const json root = parse_header(text, path);
  Header header;
  header.data_start = 8 + text.size();
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      header.metadata = parse_metadata(path, value);
    } else {
      header.entries.push_back(parse_entry(path, key, value));
    }
  }
  std::sort(header.entries.begin(), header.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(header, path, file_size);
  return header;
}

// Opens `path` for reading and returns its size.
uint64_t open_for_reading(std::ifstream& in, const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) throw FileError(path, "no such file");
  if (!fs::is_regular_file(status)) throw FileError(path, "not a regular file");
  const uint64_t size = fs::file_size(path, error);
  if (error) throw FileError(path, fmt::format("cannot read its size: {}", error.message()));
  in.open(path, std::ios::binary);
  if (!in) throw FileError(path, "cannot open");
  return size;
}

}  // namespace

CpuTensorMap load_safetensors(const fs::path& path) {
  std::ifstream in;
  const uint64_t file_size = open_for_reading(in, path);
  const Header header = read_header(in, path, file_size);
  CpuTensorMap tensors;
  in.seekg(static_cast<std::streamoff>(header.data_start));
  for (const Entry& e : header.entries) {  // in offset order: one forward pass over the file
    CpuTensor t{e.dtype, e.shape, std::vector<std::byte>(e.end - e.begin)};
    in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    if (!in) throw FileError(path, key_error(e.name, "cannot read its data (file changed?)"));
    tensors.emplace(e.name, std::move(t));
  }
  return tensors;
}

SafetensorsMetadata load_safetensors_metadata(const fs::path& path) {
  std::ifstream in;
  const uint64_t file_size = open_for_reading(in, path);
  return read_header(in, path, file_size).metadata;
}
}  // namespace axle
