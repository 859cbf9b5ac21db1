// Holds axle's public API to its boundary: cmake/public_headers.txt lists exactly the headers
// axle.h reaches (so no internal header is reachable from a public one, and every public header is
// part of what <axle/axle.h> brings), every include of a library header is spelled "axle/..." as
// an installed program spells it, and the samples include public headers only. The planted cases
// show each check fails when the tree does not hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "include_graph.h"

namespace axle::layering {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = AXLE_SOURCE_DIR;
const fs::path kPublicList = kSource / "cmake" / "public_headers.txt";

std::string lines(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += "\n  " + item;
  return text;
}

// The .h and .cpp files under `folder` of the source tree, relative to it.
std::vector<std::string> sources_under(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(kSource / folder)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && (extension == ".h" || extension == ".cpp")) {
      files.push_back(entry.path().lexically_relative(kSource).generic_string());
    }
  }
  return files;
}

TEST(PublicApi, TheListIsExactlyWhatAxleHReaches) {
  const std::vector<std::string> listed = read_list(kPublicList, "the public headers' list");
  EXPECT_GT(listed.size(), 40u);
  const std::vector<std::string> found = public_list_mismatches(kSource, listed);
  EXPECT_TRUE(found.empty()) << "cmake/public_headers.txt against axle.h's includes (a public "
                                "header may include only public ones):"
                             << lines(found);
}

TEST(PublicApi, InternalsStayOutOfTheList) {
  const std::vector<std::string> listed = read_list(kPublicList, "the public headers' list");
  for (const char* internal :
       {"engine/actor.h", "engine/mailbox.h", "engine/scheduler.h", "backends/backend.h",
        "backends/executable.h", "actors/runtime/device_actor.h", "actors/runtime/meeting_points.h",
        "actors/runtime/process_transport.h", "actors/runtime/wire.h",
        "actors/runtime/rendezvous_actor.h", "actors/host/lazy_system.h",
        "actors/compiler/lowering.h", "graph/passes/passes.h", "graph/step_graph.h"}) {
    EXPECT_EQ(std::count(listed.begin(), listed.end(), internal), 0) << internal;
  }
}

TEST(PublicApi, LibraryHeadersAreIncludedAsAxleSlash) {
  std::vector<std::string> files =
      scan_tree(kSource, read_parts(kSource / "cmake" / "layers.txt")).files;
  for (const char* folder : {"tests", "benchmarks", "examples"}) {
    for (std::string& file : sources_under(folder)) files.push_back(std::move(file));
  }
  files.push_back("axle.h");
  ASSERT_GT(files.size(), 500u);
  const std::vector<std::string> found = unprefixed_includes(kSource, files);
  EXPECT_TRUE(found.empty()) << "includes of axle's headers not as installed:" << lines(found);
}

// samples/README.md: the trainers are written against the public API only, so that a user may
// copy them.
TEST(PublicApi, SamplesIncludeOnlyPublicHeaders) {
  const std::vector<std::string> listed = read_list(kPublicList, "the public headers' list");
  std::vector<std::string> found;
  for (const std::string& file : sources_under("samples")) {
    for (const Reached& reached : include_closure(kSource, file)) {
      if (reached.file == file || reached.file.starts_with("samples/")) continue;
      if (std::count(listed.begin(), listed.end(), reached.file) == 0)
        found.push_back(file + " reaches " + reached.file + " (through " + reached.included_by +
                        ")");
    }
  }
  EXPECT_TRUE(found.empty()) << "samples reach past the public API:" << lines(found);
}

// A copy of axle.h and the library's headers in a fresh directory, to plant faults in.
class PublicApiPlanted : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::temp_directory_path() /
        ("axle_public_api_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    std::vector<std::string> files = {"axle.h"};
    for (const char* folder : {"engine", "graph", "backends", "actors", "io", "samples"}) {
      for (std::string& file : sources_under(folder)) files.push_back(std::move(file));
    }
    for (const std::string& file : files) {
      fs::create_directories((root_ / file).parent_path());
      fs::copy_file(kSource / file, root_ / file);
    }
    listed_ = read_list(kPublicList, "the public headers' list");
  }
  void TearDown() override { fs::remove_all(root_); }

  void append(const std::string& file, const std::string& text) {
    std::ofstream(root_ / file, std::ios::app) << text;
  }

  fs::path root_;
  std::vector<std::string> listed_;
};

TEST_F(PublicApiPlanted, APublicHeaderReachingAnInternalOneIsReported) {
  ASSERT_TRUE(public_list_mismatches(root_, listed_).empty());
  append("graph/tensor.h", "#include \"axle/engine/mailbox.h\"\n");
  const std::vector<std::string> found = public_list_mismatches(root_, listed_);
  ASSERT_EQ(found.size(), 1u) << lines(found);
  EXPECT_EQ(found[0], "engine/mailbox.h (included by graph/tensor.h) is not in the public list");
}

TEST_F(PublicApiPlanted, AListedHeaderAxleHDoesNotReachIsReported) {
  std::vector<std::string> listed = listed_;
  listed.push_back("engine/mailbox.h");
  const std::vector<std::string> found = public_list_mismatches(root_, listed);
  ASSERT_EQ(found.size(), 1u) << lines(found);
  EXPECT_EQ(found[0], "engine/mailbox.h is in the public list but axle.h does not reach it");
}

TEST_F(PublicApiPlanted, AnIncludeWithoutThePrefixIsReported) {
  append("samples/weights.h", "#include \"graph/tensor.h\"\n#include \"samples/resume.h\"\n");
  std::ifstream in(root_ / "samples" / "weights.h");
  int count = 0;
  for (std::string line; std::getline(in, line);) ++count;
  const std::vector<std::string> found = unprefixed_includes(root_, {"samples/weights.h"});
  ASSERT_EQ(found.size(), 1u) << lines(found);
  EXPECT_EQ(found[0], "samples/weights.h:" + std::to_string(count - 1) +
                          " includes graph/tensor.h: write axle/graph/tensor.h");
}

}  // namespace
}  // namespace axle::layering
