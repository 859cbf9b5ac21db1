// Holds axle's source tree to the order of cmake/layers.txt: every include stays in its part or
// goes down the list, every file belongs to a part, no files or units (a .cpp with its header)
// include each other in a circle, no source file runs over 600 lines and no function over 80
// (samples' over 60), and README.md's picture of
// the parts draws them in the same order. The planted cases show each check fails when the tree
// does not hold: the real tree copied with one include added that runs up, a circle, a long file,
// a file outside every part, a picture out of order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "include_graph.h"

namespace axle::layering {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = AXLE_SOURCE_DIR;
const fs::path kLayers = kSource / "cmake" / "layers.txt";

std::string lines(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += "\n  " + item;
  return text;
}

std::string cycles_text(const std::vector<std::vector<std::string>>& cycles) {
  std::string text;
  for (const auto& cycle : cycles) {
    text += "\n ";
    for (const std::string& member : cycle) text += " " + member;
  }
  return text;
}

// A copy of the tree's sources (the parts' folders) in a fresh directory, to plant faults in.
class LayeringPlanted : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("axle_layering_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    parts_ = read_parts(kLayers);
    for (const std::string& file : scan_tree(kSource, parts_).files) {
      fs::create_directories((root_ / file).parent_path());
      fs::copy_file(kSource / file, root_ / file);
    }
  }
  void TearDown() override { fs::remove_all(root_); }

  void append(const std::string& file, const std::string& text) {
    std::ofstream(root_ / file, std::ios::app) << text;
  }

  fs::path root_;
  std::vector<std::string> parts_;
};

TEST(Layering, PartsListIsReadInOrder) {
  const std::vector<std::string> parts = read_parts(kLayers);
  ASSERT_GE(parts.size(), 4u);
  EXPECT_EQ(parts.front(), "engine");
  EXPECT_EQ(parts.back(), "samples");
  EXPECT_EQ(part_of("actors/host/api.h", parts), "actors/host");
  EXPECT_EQ(part_of("graph/passes/cse.cpp", parts), "graph/passes");
  EXPECT_EQ(part_of("graph/ops/shape.cpp", parts), "graph/ops");
  EXPECT_EQ(part_of("graph/ops.h", parts), "graph");
  EXPECT_EQ(part_of("tools/x.h", parts), "");
}

TEST(Layering, TreeHasSourcesInEveryPart) {
  const std::vector<std::string> parts = read_parts(kLayers);
  const IncludeGraph graph = scan_tree(kSource, parts);
  for (const std::string& part : parts) {
    bool any = false;
    for (const std::string& file : graph.files) any = any || part_of(file, parts) == part;
    EXPECT_TRUE(any) << "no source file in part " << part << " (cmake/layers.txt)";
  }
  EXPECT_GT(graph.includes.size(), graph.files.size());
}

TEST(Layering, EveryIncludeStaysInItsPartOrGoesDown) {
  const std::vector<std::string> parts = read_parts(kLayers);
  const std::vector<std::string> violations = layering_violations(scan_tree(kSource, parts), parts);
  EXPECT_TRUE(violations.empty()) << "against cmake/layers.txt:" << lines(violations);
}

TEST(Layering, NoFilesIncludeEachOtherInACircle) {
  const IncludeGraph graph = scan_tree(kSource, read_parts(kLayers));
  const auto cycles = include_cycles(graph, /*by_unit=*/false);
  EXPECT_TRUE(cycles.empty()) << "files in a circle:" << cycles_text(cycles);
}

TEST(Layering, NoUnitsIncludeEachOtherInACircle) {
  const IncludeGraph graph = scan_tree(kSource, read_parts(kLayers));
  const auto cycles = include_cycles(graph, /*by_unit=*/true);
  EXPECT_TRUE(cycles.empty()) << "units (a .cpp with its header) in a circle:"
                              << cycles_text(cycles);
}

// README.md's architecture picture: a line per part, top first, each starting with its folder.
std::vector<std::string> parts_drawn_in(const fs::path& readme) {
  std::ifstream in(readme);
  std::string line;
  while (std::getline(in, line) &&
         line.find("the picture the layering test reads") == std::string::npos) {
  }
  while (std::getline(in, line) && line.rfind("```", 0) != 0) {
  }
  std::vector<std::string> drawn;
  while (std::getline(in, line) && line.rfind("```", 0) != 0) {
    const std::string folder = line.substr(0, line.find(' '));
    if (!folder.empty()) drawn.push_back(folder);
  }
  return drawn;
}

TEST(Layering, ReadmeDrawsThePartsInOrder) {
  std::vector<std::string> expected;
  for (const std::string& part : read_parts(kLayers)) expected.insert(expected.begin(), part + "/");
  EXPECT_EQ(parts_drawn_in(kSource / "README.md"), expected)
      << "README.md's architecture picture and cmake/layers.txt list different parts";
}

// A file longer than this is read in pieces: split it by concern (the partitioner's rules, the MPI
// loop, a kernel's geometry each have their own file).
constexpr int kMaxFileLines = 600;

// The library's parts and the code beside it that people read and copy.
std::vector<std::string> read_and_copied_files() {
  std::vector<std::string> files = scan_tree(kSource, read_parts(kLayers)).files;
  for (const char* folder : {"benchmarks", "examples"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kSource / folder)) {
      const std::string extension = entry.path().extension().string();
      if (entry.is_regular_file() && (extension == ".h" || extension == ".cpp")) {
        files.push_back(entry.path().lexically_relative(kSource).generic_string());
      }
    }
  }
  return files;
}

TEST(Layering, NoSourceFileIsLongerThan600Lines) {
  const std::vector<std::string> files = read_and_copied_files();
  ASSERT_GT(files.size(), 100u);
  const std::vector<std::string> found = files_longer_than(kSource, files, kMaxFileLines);
  EXPECT_TRUE(found.empty()) << "over " << kMaxFileLines << " lines:" << lines(found);
}

// A function longer than this does several things: each deserves a name (a dispatch over ops is
// a table of one-line cases).
constexpr int kMaxFunctionLines = 80;

TEST(Layering, NoFunctionIsLongerThan80Lines) {
  const std::vector<std::string> files = read_and_copied_files();
  ASSERT_GT(files.size(), 100u);
  const std::vector<std::string> found = functions_longer_than(kSource, files, kMaxFunctionLines);
  EXPECT_TRUE(found.empty()) << "over " << kMaxFunctionLines << " lines:" << lines(found);
}

// samples/README.md: the samples are built from small pieces people can copy, none longer than
// kMaxSampleFunctionLines.
constexpr int kMaxSampleFunctionLines = 60;

std::vector<std::string> sample_files() {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(kSource / "samples")) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && (extension == ".h" || extension == ".cpp")) {
      files.push_back(entry.path().lexically_relative(kSource).generic_string());
    }
  }
  return files;
}

TEST(Layering, NoSampleFunctionIsLongerThan60Lines) {
  const std::vector<std::string> files = sample_files();
  ASSERT_GE(files.size(), 5u);
  const std::vector<std::string> found =
      functions_longer_than(kSource, files, kMaxSampleFunctionLines);
  EXPECT_TRUE(found.empty()) << "over " << kMaxSampleFunctionLines << " lines:" << lines(found);
}

// engine/README.md: engine holds the per-thread machinery (ThisThread, this_thread_object) so that
// no other part declares a thread_local of its own and no per-replica state hides in a file.
TEST(Layering, OnlyEngineDeclaresThreadLocals) {
  const std::vector<std::string> parts = read_parts(kLayers);
  std::vector<std::string> found;
  for (const std::string& file : scan_tree(kSource, parts).files) {
    if (part_of(file, parts) == "engine") continue;
    std::ifstream in(kSource / file);
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      const std::size_t at = line.find("thread_local");
      if (at != std::string::npos && line.rfind("//", at) == std::string::npos) {
        found.push_back(file + ":" + std::to_string(number));
      }
    }
  }
  EXPECT_TRUE(found.empty()) << "thread_local outside engine/ (use engine/this_thread.h):"
                             << lines(found);
}

TEST_F(LayeringPlanted, LongFileIsReported) {
  const std::string file = "engine/log.cpp";
  ASSERT_TRUE(files_longer_than(root_, {file}, kMaxFileLines).empty());
  append(file, std::string(kMaxFileLines, '\n'));
  const std::vector<std::string> found = files_longer_than(root_, {file}, kMaxFileLines);
  ASSERT_EQ(found.size(), 1u) << lines(found);
  EXPECT_NE(found[0].find(file + " has "), std::string::npos) << found[0];
}

// A function of `body_lines` lines whose signature is wrapped over two.
std::string planted_function(const std::string& name, int body_lines) {
  std::string function = "int " + name + "(int steps,\n    int more) {\n";
  for (int i = 1; i < body_lines; ++i) function += "  steps += more;\n";
  return function + "  return steps;\n}\n\n";
}

TEST_F(LayeringPlanted, LongSampleFunctionIsReported) {
  const std::string file = "samples/planted.cpp";
  append(file, "namespace axle {\n\n" + planted_function("at_the_limit", kMaxSampleFunctionLines) +
                   planted_function("one_over", kMaxSampleFunctionLines + 1) +
                   "}  // namespace axle\n");
  const std::vector<std::string> found =
      functions_longer_than(root_, {file}, kMaxSampleFunctionLines);
  ASSERT_EQ(found.size(), 1u) << lines(found);
  EXPECT_EQ(found[0], file + ":67 one_over has 61 lines");
}

TEST_F(LayeringPlanted, ReadmePictureOutOfOrderIsReported) {
  std::ifstream in(kSource / "README.md");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t engine = text.find("\nengine/ ");
  const std::size_t backends = text.find("\nbackends/ ");
  ASSERT_NE(engine, std::string::npos);
  ASSERT_NE(backends, std::string::npos);
  text.replace(engine + 1, 7, "graph/ ");  // engine's line now names graph: a part drawn twice
  std::ofstream(root_ / "README.md") << text;
  std::vector<std::string> expected;
  for (const std::string& part : parts_) expected.insert(expected.begin(), part + "/");
  EXPECT_EQ(parts_drawn_in(kSource / "README.md"), expected);
  EXPECT_NE(parts_drawn_in(root_ / "README.md"), expected);
}

TEST_F(LayeringPlanted, UpwardIncludeIsReportedWithItsLine) {
  ASSERT_TRUE(layering_violations(scan_tree(root_, parts_), parts_).empty());
  std::ifstream in(root_ / "engine" / "log.h");
  int count = 0;
  for (std::string line; std::getline(in, line);) ++count;
  append("engine/log.h", "#include \"axle/actors/host/api.h\"\n");

  const std::vector<std::string> violations = layering_violations(scan_tree(root_, parts_), parts_);
  ASSERT_EQ(violations.size(), 1u) << lines(violations);
  EXPECT_EQ(violations[0], "engine/log.h:" + std::to_string(count + 1) +
                               " includes actors/host/api.h: actors/host is above engine");
}

TEST_F(LayeringPlanted, UnitCircleIsReported) {
  // engine/config.cpp already includes engine/cores.h: cores.h including config.h closes a circle
  // of two units, though no file includes itself.
  append("engine/cores.h", "#include \"axle/engine/config.h\"\n");
  const IncludeGraph graph = scan_tree(root_, parts_);
  EXPECT_TRUE(layering_violations(graph, parts_).empty());
  EXPECT_TRUE(include_cycles(graph, /*by_unit=*/false).empty());
  const auto cycles = include_cycles(graph, /*by_unit=*/true);
  ASSERT_EQ(cycles.size(), 1u) << cycles_text(cycles);
  EXPECT_EQ(cycles[0], (std::vector<std::string>{"engine/config", "engine/cores"}));
}

TEST_F(LayeringPlanted, FileCircleIsReported) {
  append("engine/shape.h", "#include \"axle/engine/dtype.h\"\n");
  append("engine/dtype.h", "#include \"axle/engine/shape.h\"\n");
  const auto cycles = include_cycles(scan_tree(root_, parts_), /*by_unit=*/false);
  ASSERT_EQ(cycles.size(), 1u) << cycles_text(cycles);
  EXPECT_EQ(cycles[0], (std::vector<std::string>{"engine/dtype.h", "engine/shape.h"}));
}

TEST_F(LayeringPlanted, FileOutsideEveryPartIsReported) {
  fs::create_directories(root_ / "engine" / "sub");
  std::ofstream(root_ / "engine" / "sub" / "inner.h") << "#pragma once\n";
  const std::vector<std::string> parts = {"engine/sub"};
  const std::vector<std::string> violations = layering_violations(scan_tree(root_, parts), parts);
  auto reported = [&](const std::string& line) {
    return std::find(violations.begin(), violations.end(), line) != violations.end();
  };
  EXPECT_TRUE(reported("engine/log.h belongs to no part")) << lines(violations);
  EXPECT_FALSE(reported("engine/sub/inner.h belongs to no part"));
  // A part is a folder: engine/subway.h is not in engine/sub.
  EXPECT_EQ(part_of("engine/subway.h", parts), "");
}

}  // namespace
}  // namespace axle::layering
