// graph/formats: TensorBoard event files (see event_file.h).
#include "axle/graph/formats/event_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>

#include "axle/graph/formats/error.h"
#include "graph/formats/event.pb.h"

namespace axle {
namespace {

// The reflected CRC-32C table (polynomial 0x82F63B78).
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

template <class T>
T load_le(const std::byte* p) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  return value;
}

template <class T>
void store_le(T value, char* p) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace

uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  uint32_t crc = ~0u;
  for (std::byte b : bytes) crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(b)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::span<const std::byte> bytes) noexcept {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFile parse_event_records(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  EventFile file;
  std::size_t at = 0;
  while (at < bytes.size()) {
    auto fail = [&](std::string_view what) {
      throw FileError(path, fmt::format("the record at byte {}: {}", at, what));
    };
    if (bytes.size() - at < 12) fail("truncated in its length");
    const auto length = load_le<uint64_t>(bytes.data() + at);
    if (load_le<uint32_t>(bytes.data() + at + 8) != masked_crc32c(bytes.subspan(at, 8))) {
      fail("its length's CRC does not match");
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      fail(fmt::format("truncated: {} bytes of data announced, {} left", length,
                       bytes.size() - at - 12));
    }
    const std::span<const std::byte> data = bytes.subspan(at + 12, length);
    if (load_le<uint32_t>(bytes.data() + at + 12 + length) != masked_crc32c(data)) {
      fail("its data's CRC does not match");
    }
    proto::tensorboard::Event event;
    if (!event.ParseFromArray(data.data(), static_cast<int>(length))) fail("not an Event");
    if (event.has_file_version()) file.file_version = event.file_version();
    if (event.has_summary()) {
      for (const auto& v : event.summary().value()) {
        EventValue value{.wall_time = event.wall_time(), .step = event.step(), .tag = v.tag()};
        if (v.has_histo()) {
          value.histogram = true;
          value.value = v.histo().sum();
          value.count = v.histo().num();
          value.bucket_limit.assign(v.histo().bucket_limit().begin(),
                                    v.histo().bucket_limit().end());
          value.bucket.assign(v.histo().bucket().begin(), v.histo().bucket().end());
        } else {
          value.value = v.simple_value();
        }
        file.values.push_back(std::move(value));
      }
    }
    at += 12 + length + 4;
  }
  return file;
}

EventFile read_event_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, "cannot open the event file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  return parse_event_records(as_bytes(bytes), path);
}

EventFileWriter::EventFileWriter(const std::filesystem::path& path)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
  if (!out_) throw FileError(path, "cannot create the event file");
  proto::tensorboard::Event event;
  event.set_wall_time(0);
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
  flush();
}

void EventFileWriter::write_record(const std::string& data) {
  std::string record(12 + data.size() + 4, '\0');
  store_le<uint64_t>(data.size(), record.data());
  store_le<uint32_t>(masked_crc32c(as_bytes(record.substr(0, 8))), record.data() + 8);
  std::memcpy(record.data() + 12, data.data(), data.size());
  store_le<uint32_t>(masked_crc32c(as_bytes(data)), record.data() + 12 + data.size());
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  if (!out_) throw FileError(path_, "cannot write the event file");
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                 double wall_time) {
  proto::tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void EventFileWriter::add_histogram(const std::string& tag, std::span<const double> values,
                                    int64_t step, double wall_time, int bins) {
  proto::tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* histo = v->mutable_histo();
  if (values.empty()) {
    write_record(event.SerializeAsString());
    return;
  }
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  double sum = 0, squares = 0;
  for (double x : values) {
    sum += x;
    squares += x * x;
  }
  histo->set_min(*lo);
  histo->set_max(*hi);
  histo->set_num(static_cast<double>(values.size()));
  histo->set_sum(sum);
  histo->set_sum_squares(squares);
  bins = std::max(bins, 1);
  const double width = (*hi - *lo) / bins;
  std::vector<double> counts(static_cast<std::size_t>(bins), 0.0);
  for (double x : values) {
    int b = width > 0 ? static_cast<int>((x - *lo) / width) : 0;
    counts[static_cast<std::size_t>(std::clamp(b, 0, bins - 1))] += 1;
  }
  for (int b = 0; b < bins; ++b) {
    histo->add_bucket_limit(b + 1 == bins ? *hi : *lo + width * (b + 1));
    histo->add_bucket(counts[static_cast<std::size_t>(b)]);
  }
  write_record(event.SerializeAsString());
}

void EventFileWriter::flush() {
  out_.flush();
  if (!out_) throw FileError(path_, "cannot write the event file");
}

}  // namespace axle
