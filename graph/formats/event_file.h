// graph/formats: TensorBoard event files (events.out.tfevents.*) — TFRecord framing (a
// little-endian u64 length, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of
// the data) around protobuf `Event`s: a file version first, then scalar and histogram summaries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace axle {

/// CRC-32C (Castagnoli) of `bytes`, and TFRecord's masked form of it.
[[nodiscard]] uint32_t crc32c(std::span<const std::byte> bytes) noexcept;
/// As above, masked as TFRecord stores it (rotated right by 15, plus 0xa282ead8).
[[nodiscard]] uint32_t masked_crc32c(std::span<const std::byte> bytes) noexcept;

/// One summary value read back from an event file.
struct EventValue {
  /// The event's time, in seconds since the Unix epoch.
  double wall_time = 0;
  /// The global step the value was recorded at.
  int64_t step = 0;
  /// The value's tag ("loss", "step_breakdown/executing_ms").
  std::string tag;
  double value = 0;  ///< a scalar's value (a histogram's: its sum)
  /// Whether the value is a histogram rather than a scalar.
  bool histogram = false;
  double count = 0;                  ///< a histogram's number of values
  std::vector<double> bucket_limit;  ///< a histogram's buckets' right edges
  std::vector<double> bucket;        ///< and counts
};

/// What an event file holds: its file_version ("brain.Event:2") and its summary values in
/// order.
struct EventFile {
  /// The version string of the file's first event ("brain.Event:2").
  std::string file_version;
  /// Every summary value of the file, in order.
  std::vector<EventValue> values;
};

/// Reads the event file at `path`, checking every record's two CRCs. Throws FileError naming
/// the file and the record's offset for a truncated record, a CRC that does not match, or a
/// record that is not an Event.
[[nodiscard]] EventFile read_event_file(const std::filesystem::path& path);
/// The same from bytes in memory (`path` names them in errors).
[[nodiscard]] EventFile parse_event_records(std::span<const std::byte> bytes,
                                            const std::filesystem::path& path);

/// Appends events to one file, each record written whole and flushed (a reader, or a crash,
/// never sees half a record past the last flush).
class EventFileWriter {
 public:
  /// Creates `path` (truncating it) and writes the file-version event. Throws FileError.
  explicit EventFileWriter(const std::filesystem::path& path);

  /// A scalar `value` (stored as a float) under `tag` at `step`; `wall_time` in seconds since the
  /// Unix epoch.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  /// A histogram of `values` over `bins` equal buckets between their min and max.
  void add_histogram(const std::string& tag, std::span<const double> values, int64_t step,
                     double wall_time, int bins = 30);
  /// Makes what was written reach the file (and the reader).
  void flush();

  /// The file being written.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace axle
