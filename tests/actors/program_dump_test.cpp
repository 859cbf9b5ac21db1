// Program dumps (actors/compiler/program_dump.h): XLA_SAVE_TENSORS_FMT=hlo saves the lowered
// program (fused kernels, buffers, sizes); XLA_FLAGS=--xla_dump_to=DIR writes each compiled program
// before and after the compiler; XLA_SAVE_HLO_FILE saves the program of an execution that failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ProgramDump : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("axle_program_dump_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    for (const char* name :
         {"XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT", "XLA_FLAGS", "XLA_SAVE_HLO_FILE"}) {
      config::unset(name);
    }
    LazySystem::restart();
    std::filesystem::remove_all(dir_);
  }
  // A step with a fusible chain after a product.
  static Tensor step() {
    Tensor a = tensor(std::vector<float>(12, 1.0f), {3, 4});
    Tensor b = tensor(std::vector<float>(8, 0.5f), {4, 2});
    Tensor y = relu(exp(matmul(a, b) * 2.0) + 1.0);
    mark_step();
    return y;
  }
  std::filesystem::path dir_;
};

TEST_F(ProgramDump, HloFormatSavesTheLoweredProgram) {
  config::set("XLA_SAVE_TENSORS_FILE", (dir_ / "graphs.txt").string());
  config::set("XLA_SAVE_TENSORS_FMT", "hlo");
  LazySystem::restart();
  (void)step().to_vector<float>();
  const std::string text = read_all(dir_ / "graphs.txt");
  EXPECT_NE(text.find("program "), std::string::npos) << text;
  EXPECT_NE(text.find("= matmul(%"), std::string::npos) << text;
  EXPECT_NE(text.find("= fused(%"), std::string::npos) << text;
  EXPECT_NE(text.find("input 0: %"), std::string::npos) << text;
  EXPECT_NE(text.find("(48 bytes)"), std::string::npos) << text;  // the 3x4 input
  EXPECT_NE(text.find("peak "), std::string::npos) << text;
}

TEST_F(ProgramDump, XlaDumpToWritesEachProgramBeforeAndAfterTheCompiler) {
  config::set("XLA_FLAGS", "--xla_foo=1 --xla_dump_to=" + (dir_ / "dump").string());
  LazySystem::restart();
  (void)step().to_vector<float>();
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "dump")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_NE(names[0].find(".after.txt"), std::string::npos);
  EXPECT_NE(names[1].find(".before.txt"), std::string::npos);
  const std::string before = read_all(dir_ / "dump" / names[1]);
  const std::string after = read_all(dir_ / "dump" / names[0]);
  EXPECT_NE(before.find("= exp f32[3,2]"), std::string::npos) << before;
  EXPECT_NE(before.find("program_dump_test.cpp:"), std::string::npos) << before;
  EXPECT_NE(after.find("= fused("), std::string::npos) << after;
}

// An SPMD compile also writes every instruction's sharding after propagation and the per-device
// program with each collective the partitioner inserted, named with what it was inserted for.
TEST_F(ProgramDump, XlaDumpToWritesAnSpmdProgramsShardingsAndCollectives) {
  config::set("XLA_FLAGS", "--xla_dump_to=" + (dir_ / "dump").string());
  LazySystem::restart({.cpu_devices = 4});
  use_spmd();
  const spmd::Mesh mesh({0, 1, 2, 3}, {1, 4}, {"data", "model"});
  const Tensor x = tensor(std::vector<float>(8 * 16, 1.0f), {8, 16});
  const Tensor w = tensor(std::vector<float>(16 * 4, 0.5f), {16, 4});
  spmd::mark_sharding(x, mesh, {std::nullopt, "model"});
  spmd::mark_sharding(w, mesh, {"model", std::nullopt});
  const Tensor y = exp(x) * 0.0 + 1.0;
  const Tensor z = matmul(y, w);  // contracted over "model": one all_reduce
  mark_step();
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(8 * 4, 8.0f));
  std::vector<std::filesystem::path> spmd;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "dump")) {
    if (entry.path().string().ends_with(".spmd.txt")) spmd.push_back(entry.path());
  }
  ASSERT_EQ(spmd.size(), 1u);
  const std::string text = read_all(spmd[0]);
  EXPECT_NE(text.find("after sharding propagation:"), std::string::npos) << text;
  // The exp's sharding came from x's annotation; the product is replicated.
  EXPECT_NE(text.find("= exp f32[8,16] %0  # sharding={devices=[1,4]0,1,2,3}"), std::string::npos)
      << text;
  EXPECT_NE(text.find("= matmul f32[8,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("after SPMD partitioning, the program of each of 4 devices (1 collective "
                      "inserted"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("= all_reduce f32[8,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("# inserted for %"), std::string::npos) << text;
  EXPECT_NE(text.find("(matmul f32[8,4])"), std::string::npos) << text;
}

TEST_F(ProgramDump, AFailedExecutionSavesItsProgram) {
  config::set("XLA_SAVE_HLO_FILE", (dir_ / "failed.txt").string());
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>(6, 1.0f), {3, 2});
  Tensor picked = index_select(x, 0, tensor(std::vector<int64_t>{7}, {1}));  // row 7 of 3
  EXPECT_THROW((void)picked.to_vector<float>(), std::exception);
  const std::string text = read_all(dir_ / "failed.txt");
  EXPECT_NE(text.find("[execution failed: kernel index_select"), std::string::npos) << text;
  EXPECT_NE(text.find("= index_select(%"), std::string::npos) << text;
}

}  // namespace
}  // namespace axle
