// io: checkpoints.
#include "io/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "actors/api.h"
#include "actors/replicas.h"
#include "engine/hash.h"
#include "engine/metrics.h"
#include "io/atomic_file.h"
#include "io/checkpoint.pb.h"
#include "io/error.h"

namespace axle {
namespace {

constexpr std::string_view kMagic = "axle checkpoint";
// A TensorMeta or header is small; anything larger is a damaged length.
constexpr uint64_t kMaxMessageBytes = 1 << 20;

uint64_t checksum(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 0x100000001b3ULL;
  return h;
}

std::optional<DType> dtype_named(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

void write_message(AtomicFileWriter& out, const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  std::array<std::byte, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) {
    length[i] = static_cast<std::byte>((bytes.size() >> (8 * i)) & 0xff);
  }
  out.write(length);
  out.write(bytes);
}

class Reader {
 public:
  explicit Reader(const std::filesystem::path& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw FileError(path, "cannot be opened");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }

  [[nodiscard]] bool at_end() { return offset_ == size_; }

  // The next length-framed message into `message`; `what` names it in errors.
  void message(google::protobuf::MessageLite& message, const std::string& what) {
    std::array<unsigned char, 8> length_bytes{};
    read(length_bytes.data(), 8, what);
    uint64_t length = 0;
    for (std::size_t i = 0; i < 8; ++i) length |= uint64_t{length_bytes[i]} << (8 * i);
    if (length > kMaxMessageBytes || length > size_ - offset_) {
      fail(fmt::format("truncated or damaged: {} claims {} bytes, {} remain", what, length,
                       size_ - offset_));
    }
    std::string bytes(length, '\0');
    read(bytes.data(), length, what);
    if (!message.ParseFromString(bytes)) fail(fmt::format("damaged: {} does not parse", what));
  }

  void read(void* into, uint64_t bytes, const std::string& what) {
    if (bytes > size_ - offset_) {
      fail(fmt::format("truncated: {} needs {} bytes, {} remain", what, bytes, size_ - offset_));
    }
    in_.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes));
    if (!in_) fail(fmt::format("reading {} failed", what));
    offset_ += bytes;
  }

  [[noreturn]] void fail(const std::string& what) const { throw FileError(path_, what); }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
};

void write_checkpoint(const nn::StateDict& state, const std::filesystem::path& path) {
  AtomicFileWriter out(path);
  proto::CheckpointHeader header;
  header.set_magic(std::string(kMagic));
  header.set_axle_version(AXLE_VERSION_STRING);
  header.set_tensor_count(state.size());
  write_message(out, header);
  for (const auto& [name, tensor] : state) {
    if (!tensor.defined()) throw FileError(path, fmt::format("key \"{}\" is undefined", name));
    CpuTensor host = tensor.to_cpu();  // the one tensor on the host
    AXLE_METRIC_ADD("CheckpointHostBytes", MetricKind::kBytes,
                    static_cast<double>(host.bytes.size()));
    proto::TensorMeta meta;
    meta.set_name(name);
    meta.set_dtype(std::string(dtype_name(host.dtype)));
    for (int64_t d : host.shape.dims()) meta.add_dims(d);
    meta.set_byte_size(host.bytes.size());
    meta.set_checksum(checksum(host.bytes));
    write_message(out, meta);
    out.write(host.bytes);
  }
  out.commit();
}

}  // namespace

void save(const nn::StateDict& state, const std::filesystem::path& path, bool master_only,
          bool global_master) {
  const bool replicated = world_size() > 1;
  // Pending values are computed by every replica, as they would be at its next mark_step: a
  // graph with collectives that the master alone ran would wait for the others forever.
  if (replicated && std::ranges::any_of(state, [](const auto& entry) {
        return entry.second.defined() && entry.second.impl()->pending_ir();
      })) {
    mark_step();
  }
  if (!master_only || is_master_ordinal(/*local=*/!global_master)) write_checkpoint(state, path);
  // As torch_xla's xm.save: every replica returns once the file is there.
  if (replicated) rendezvous("axle::save");
}

nn::StateDict load(const std::filesystem::path& path, Device device) {
  Reader in(path);
  proto::CheckpointHeader header;
  in.message(header, "the header");
  if (header.magic() != kMagic) in.fail("not an axle checkpoint (wrong magic)");
  nn::StateDict state;
  for (uint64_t i = 0; i < header.tensor_count(); ++i) {
    proto::TensorMeta meta;
    in.message(meta, fmt::format("the description of tensor {}", i));
    const std::string key = fmt::format("key \"{}\"", meta.name());
    const std::optional<DType> dtype = dtype_named(meta.dtype());
    if (!dtype) in.fail(fmt::format("{}: unknown dtype \"{}\"", key, meta.dtype()));
    if (meta.dims_size() > Shape::kMaxRank)
      in.fail(fmt::format("{}: rank {}", key, meta.dims_size()));
    uint64_t expected = dtype_size(*dtype);
    for (int64_t d : meta.dims()) {
      if (d < 0 || (d > 0 && expected > meta.byte_size() / static_cast<uint64_t>(d))) {
        in.fail(fmt::format("{}: dims [{}] do not fit its {} bytes", key,
                            fmt::join(meta.dims(), ","), meta.byte_size()));
      }
      expected *= static_cast<uint64_t>(d);
    }
    const Shape shape(std::span<const int64_t>(meta.dims().data(), meta.dims_size()));
    if (expected != meta.byte_size()) {
      in.fail(fmt::format("{}: {} bytes do not hold {}{}", key, meta.byte_size(),
                          dtype_name(*dtype), shape.to_string()));
    }
    std::vector<std::byte> bytes(meta.byte_size());
    in.read(bytes.data(), bytes.size(), key);
    if (checksum(bytes) != meta.checksum()) in.fail(fmt::format("{}: checksum mismatch", key));
    Tensor t = tensor_from_bytes(bytes, *dtype, shape, device);
    (void)t.impl()->data()->wait();  // on the device before the next tensor comes to the host
    state.emplace_back(meta.name(), std::move(t));
  }
  if (!in.at_end()) in.fail("damaged: bytes after the last tensor");
  return state;
}

}  // namespace axle
