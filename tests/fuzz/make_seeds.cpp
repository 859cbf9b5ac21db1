// tests/fuzz: writes the seed corpora, small valid files made by axle's own writers (IDX, which
// axle only reads, by hand as MNIST's files are laid out). Run from the fuzz build when a format
// or the kernel table changes (cache entries record its fingerprint), and commit the result:
//   build-fuzz/bin/fuzz_make_seeds tests/fuzz
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/compiler/persistent_cache.pb.h"
#include "axle/actors/compiler/persistent_cache.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/event_file.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/graph/formats/shard_metadata.h"
#include "axle/graph/formats/step_commit.h"
#include "tests/fuzz/persistent_cache_input.h"
#include "tests/fuzz/sharded_checkpoint_input.h"
#include "tests/fuzz/step_commit_input.h"

namespace fs = std::filesystem;
using namespace axle;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", what.c_str());
    std::exit(1);
  }
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  require(static_cast<bool>(out), "cannot write " + path.string());
}

// An IDX file: magic (0, 0, type, rank), big-endian sizes, then `elements` already big-endian.
std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                      const std::string& elements) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((d >> shift) & 0xff);
  }
  return out + elements;
}

void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb9");
  require(file != nullptr, "cannot write " + path.string());
  require(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
              static_cast<int>(bytes.size()),
          "gzwrite failed");
  gzclose(file);
}

template <class T>
CpuTensor host_tensor(const std::vector<T>& values, Shape shape) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return CpuTensor(dtype_of<T>(), shape, std::move(bytes));
}

void idx_seeds(const fs::path& dir) {
  std::string pixels;
  for (int i = 0; i < 18; ++i) pixels += static_cast<char>(i * 14);
  write_bytes(dir / "u8-2x3x3.idx", idx_bytes(0x08, {2, 3, 3}, pixels));
  write_bytes(dir / "s8-5.idx", idx_bytes(0x09, {5}, std::string("\x01\xff\x7f\x80\x00", 5)));
  write_bytes(dir / "i16-2x2.idx",
              idx_bytes(0x0B, {2, 2}, std::string("\x00\x01\xff\xfe\x7f\xff\x80\x00", 8)));
  // 1.0f, -2.5f big-endian.
  write_bytes(dir / "f32-2.idx",
              idx_bytes(0x0D, {2}, std::string("\x3f\x80\x00\x00\xc0\x20\x00\x00", 8)));
  write_bytes(dir / "f64-scalar.idx",
              idx_bytes(0x0E, {}, std::string("\x40\x09\x21\xfb\x54\x44\x2d\x18", 8)));
  write_gzip(
      dir / "labels-i32-3.idx.gz",
      idx_bytes(0x0C, {3}, std::string("\x00\x00\x00\x07\x00\x00\x00\x00\xff\xff\xff\xff", 12)));
  write_gzip(dir / "u8-2x3x3.idx.gz", idx_bytes(0x08, {2, 3, 3}, pixels));
}

void safetensors_seeds(const fs::path& dir) {
  CpuTensorMap tensors;
  tensors.emplace("weight", host_tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}));
  tensors.emplace("bias", host_tensor<float>({0.5f, -0.5f}, Shape{2}));
  tensors.emplace("steps", host_tensor<int64_t>({7}, Shape{}));
  tensors.emplace("mask",
                  CpuTensor(DType::kBool, Shape{3}, {std::byte{1}, std::byte{0}, std::byte{1}}));
  save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  CpuTensorMap more;
  more.emplace("half",
               CpuTensor(DType::kBFloat16, Shape{2}, std::vector<std::byte>(4, std::byte{0x3f})));
  more.emplace("ids", host_tensor<int32_t>({1, 2, 3, 4}, Shape{2, 2}));
  more.emplace("empty", host_tensor<double>({}, Shape{0, 3}));
  save_safetensors(dir / "mixed.safetensors", more);
  save_safetensors(dir / "none.safetensors", {});
}

void checkpoint_seeds(const fs::path& dir) {
  {
    CheckpointWriter out(dir / "two.ckpt", 2);
    out.add("fc.weight", host_tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}));
    out.add("step", host_tensor<int64_t>({12}, Shape{}));
    out.commit();
  }
  {
    CheckpointWriter out(dir / "empty.ckpt", 0);
    out.commit();
  }
}

// Commit files of the step directory step_commit_input.h makes: one for it as it is, and one
// that lists a file it does not hold.
void step_commit_seeds(const fs::path& dir, const fs::path& scratch) {
  const fs::path step = scratch / "step";
  fuzz::make_step_directory(step);
  write_step_commit(step, 20, 4);
  fs::copy_file(step / kStepCommitFile, dir / "whole.json", fs::copy_options::overwrite_existing);
  std::ofstream(step / "rng.0.json") << "{}";
  write_step_commit(step, 20, 4);
  fs::remove(step / "rng.0.json");
  fs::copy_file(step / kStepCommitFile, dir / "missing_file.json",
                fs::copy_options::overwrite_existing);
}

void sharded_checkpoint_seeds(const fs::path& dir, const fs::path& scratch) {
  // Two replicas of a model with one flat parameter (a 2x2 weight and a 3-element bias, padded
  // to 8) and a buffer.
  std::string joined;
  std::string texts;
  for (int rank = 0; rank < 2; ++rank) {
    ShardMetadata meta{.world_size = 2, .rank = rank};
    FlatParameterInfo flat{.name = "_fsdp_wrapped_module.flat_param_0",
                           .dtype = DType::kFloat32,
                           .padded_numel = 8,
                           .shard_shape = {4}};
    flat.params.push_back({.names = {"fc.weight"}, .shape = {2, 2}, .offset = 0, .numel = 4});
    flat.params.push_back(
        {.names = {"fc.bias", "tied.bias"}, .shape = {3}, .offset = 4, .numel = 3});
    meta.flat_params.push_back(flat);
    const std::string text = meta.to_text();
    texts += (rank ? std::string(fuzz::kSeparator) : "") + text;
    const fs::path path = scratch / ("rank" + std::to_string(rank) + ".ckpt");
    CheckpointWriter out(path, 3);
    out.add(flat.name,
            host_tensor<float>({1.f + 4 * rank, 2.f + 4 * rank, 3.f + 4 * rank, 4.f + 4 * rank},
                               Shape{4}));
    out.add("_fsdp_wrapped_module.running_mean", host_tensor<float>({0.25f}, Shape{1}));
    out.add("shard_metadata", host_tensor<int32_t>(std::vector<int32_t>(text.begin(), text.end()),
                                                   Shape{static_cast<int64_t>(text.size())}));
    out.commit();
    const std::string bytes = read_bytes(path);
    joined += (rank ? std::string(fuzz::kSeparator) : "") + bytes;
    fs::remove(path);
  }
  write_bytes(dir / "two-replicas", joined);
  write_bytes(dir / "two-replicas-text", texts);
  ShardMetadata single{.world_size = 1, .rank = 0};
  single.flat_params.push_back(
      {.name = "flat_param_0", .dtype = DType::kFloat32, .padded_numel = 2, .shard_shape = {2}});
  single.flat_params.back().params.push_back(
      {.names = {"w"}, .shape = {2}, .offset = 0, .numel = 2});
  const std::string text = single.to_text();
  const fs::path path = scratch / "single.ckpt";
  CheckpointWriter out(path, 2);
  out.add("flat_param_0", host_tensor<float>({3, 4}, Shape{2}));
  out.add("shard_metadata", host_tensor<int32_t>(std::vector<int32_t>(text.begin(), text.end()),
                                                 Shape{static_cast<int64_t>(text.size())}));
  out.commit();
  write_bytes(dir / "one-replica", read_bytes(path));
  fs::remove(path);
}

void fill_seed_program(Executable& program, bool with_plan) {
  program.slots = {{DType::kFloat32, Shape{2, 3}},
                   {DType::kFloat32, Shape{2, 3}},
                   {DType::kFloat32, Shape{2, 3}},
                   {DType::kFloat32, Shape{2, 3}}};
  program.input_slots = {0, 1};
  program.calls.push_back({.kernel = Kernel::kAdd, .inputs = {0, 1}, .output = 2});
  program.calls.push_back({.kernel = Kernel::kMul, .inputs = {2, 2}, .output = 3});
  program.output_slots = {3};
  program.graph_hash = fuzz::kSeedHash;
  if (with_plan) {
    program.plan.release_begin = {0, 0, 0};
    program.plan.in_place = {-1, 2};
    program.plan.peak_bytes = 72;
    program.donated_inputs = {0, 0};
  }
  const std::string why = program_error(program);
  require(why.empty(), "the seed program is invalid: " + why);
}

void persistent_cache_seeds(const fs::path& dir) {
  for (bool with_plan : {false, true}) {
    Executable program;
    fill_seed_program(program, with_plan);
    const std::string entry = PersistentCache::encode_entry(fuzz::kSeedHash, program);
    proto::CacheEntry parsed;
    require(parsed.ParseFromString(entry), "the seed entry does not parse");
    const std::string name = with_plan ? "planned" : "plain";
    for (uint8_t interface : {uint8_t{0}, fuzz::kWithInterface}) {
      const std::string suffix = interface ? "-interface" : "";
      write_bytes(dir / (name + "-entry" + suffix),
                  std::string(1, static_cast<char>(interface)) + entry);
      write_bytes(
          dir / (name + "-program" + suffix),
          std::string(1, static_cast<char>(interface | fuzz::kWrapProgram)) + parsed.program());
    }
  }
}

// A scalar run and a histogram, as SummaryWriter writes them.
void event_file_seeds(const fs::path& dir) {
  EventFileWriter writer(dir / "scalars.tfevents");
  for (int step = 1; step <= 3; ++step) writer.add_scalar("train/loss", 2.0 / step, step, 1e9);
  const double values[] = {0, 1, 2, 3, 4, 5};
  writer.add_histogram("weights", values, 3, 1e9, 3);
  writer.flush();
}

}  // namespace

int main(int argc, char** argv) {
  require(argc == 2, "usage: fuzz_make_seeds DIR (tests/fuzz)");
  const fs::path root = argv[1];
  for (const char* name : {"idx", "safetensors", "checkpoint", "sharded_checkpoint",
                           "persistent_cache", "event_file", "step_commit"}) {
    fs::create_directories(root / name);
  }
  const fs::path scratch =
      fs::temp_directory_path() / ("axle-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  idx_seeds(root / "idx");
  safetensors_seeds(root / "safetensors");
  checkpoint_seeds(root / "checkpoint");
  sharded_checkpoint_seeds(root / "sharded_checkpoint", scratch);
  persistent_cache_seeds(root / "persistent_cache");
  event_file_seeds(root / "event_file");
  step_commit_seeds(root / "step_commit", scratch);
  fs::remove_all(scratch);
  return 0;
}
