// Tests the rule engine/config.h states: engine/config.cpp and the parts' own settings readers
// (files named *_settings.cpp) are the only source files that read environment variables
// (getenv, secure_getenv) or settings by name (config::get, get_int, get_bool, get_double,
// get_string); everything else takes the settings structs. Scans axle's source folders (not
// tests/, which set variables on purpose) and names each offending line; and holds README.md's
// table of variables to exactly the variables those files read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace axle {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 7> kScannedFolders = {
    "engine", "graph", "actors", "backends", "io", "samples", "benchmarks"};
constexpr std::string_view kTheReader = "engine/config.cpp";

// Whether `relative` may read settings by name: engine's reader, or a part's own group.
bool is_settings_reader(const std::string& relative) {
  return relative == kTheReader || relative.ends_with("_settings.cpp");
}

bool is_source(const fs::path& path) {
  static constexpr std::array<std::string_view, 6> kExtensions = {".h",  ".hpp", ".cpp",
                                                                  ".cc", ".cxx", ".inl"};
  const std::string extension = path.extension().string();
  for (std::string_view e : kExtensions) {
    if (extension == e) return true;
  }
  return false;
}

// "folder/file:line: text" for every line under `root`'s scanned folders that reads a variable
// or a setting by name, outside the settings readers. Text after // is a comment and not looked
// at.
std::vector<std::string> settings_reads_outside_config(const fs::path& root) {
  static const std::regex kRead(
      R"(\b(secure_)?getenv\s*\(|\bconfig::get(_int|_bool|_double|_string)?\s*\()");
  std::vector<std::string> found;
  for (std::string_view folder : kScannedFolders) {
    const fs::path dir = root / folder;
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string relative = entry.path().lexically_relative(root).generic_string();
      if (is_settings_reader(relative)) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        const std::string code = line.substr(0, line.find("//"));
        if (std::regex_search(code, kRead)) {
          found.push_back(relative + ":" + std::to_string(number) + ": " + line);
        }
      }
    }
  }
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

TEST(ConfigScan, OnlyEngineConfigReadsVariablesOrSettingsByName) {
  const std::vector<std::string> found = settings_reads_outside_config(AXLE_SOURCE_DIR);
  EXPECT_TRUE(found.empty())
      << "only engine/config.cpp and a part's *_settings.cpp may read environment variables or "
         "settings by name; add the setting to a settings struct and pass it down instead:\n"
      << joined(found);
}

// The variable names (upper-case words with an underscore) in `text`, in `quote`s.
std::set<std::string> variable_names(const std::string& text, char quote) {
  const std::regex name(std::string(1, quote) + "([A-Z][A-Z0-9]*_[A-Z0-9_]+)" + quote);
  std::set<std::string> names;
  for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The settings readers under `root`'s scanned folders, relative to it.
std::vector<std::string> settings_readers(const fs::path& root) {
  std::vector<std::string> readers;
  for (std::string_view folder : kScannedFolders) {
    if (!fs::is_directory(root / folder)) continue;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string relative = entry.path().lexically_relative(root).generic_string();
      if (entry.is_regular_file() && is_settings_reader(relative)) readers.push_back(relative);
    }
  }
  std::sort(readers.begin(), readers.end());
  return readers;
}

// README.md's table of variables and the names the settings readers read agree, so the table
// neither misses a setting nor documents one that is gone.
TEST(ConfigScan, TheReadmeTableListsExactlyTheVariablesTheSettingsReadersRead) {
  const fs::path root = AXLE_SOURCE_DIR;
  const std::vector<std::string> readers = settings_readers(root);
  // engine's, and the parts' own groups.
  for (const char* reader :
       {"engine/config.cpp", "graph/graph_settings.cpp", "graph/passes/pass_settings.cpp",
        "backends/device_settings.cpp", "actors/compiler/compiler_settings.cpp",
        "actors/runtime/transport_settings.cpp", "actors/runtime/collective_settings.cpp",
        "actors/host/lazy_settings.cpp"}) {
    EXPECT_NE(std::find(readers.begin(), readers.end(), reader), readers.end()) << reader;
  }
  std::set<std::string> read;
  for (const std::string& reader : readers)
    read.merge(variable_names(file_text(root / reader), '"'));
  std::string table;  // the first column of each row of the Configuration section's table
  std::istringstream readme(file_text(root / "README.md"));
  bool in_section = false;
  for (std::string line; std::getline(readme, line);) {
    if (line.starts_with("## ")) in_section = line == "## Configuration";
    if (in_section && line.starts_with("| `")) table += line.substr(0, line.find(" | ")) + "\n";
  }
  const std::set<std::string> documented = variable_names(table, '`');
  EXPECT_TRUE(read.contains("PJRT_DEVICE")) << "no variable names found in " << kTheReader;
  EXPECT_EQ(documented, read);
}

// The scan itself, on a small tree with one read of each kind where it is not allowed.
TEST(ConfigScan, NamesTheFileAndLineOfEachReadOutsideEngineConfig) {
  const fs::path root =
      fs::temp_directory_path() / ("axle_config_scan_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& relative, const std::string& text) {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << text;
  };
  write("engine/config.cpp", "const char* v = std::getenv(name);\n");
  write("graph/reads.cpp", "int a;\n// getenv( in a comment is fine\nauto v = ::getenv(\"X\");\n");
  write("backends/cpu/reads.h", "\nint t = config::get_int(\"A\", 1);\n");
  write("samples/secure.cpp", "auto s = secure_getenv (\"B\");\n");
  write("io/fine.cpp", "config::set(\"C\", \"1\"); auto x = my_getenv_free(1);\n");
  write("graph/passes/pass_settings.cpp", "auto v = config::get_string(\"E\", \"\");\n");
  write("tests/engine/ok_test.cpp", "auto v = std::getenv(\"D\");\n");
  write("graph/notes.txt", "getenv(\n");
  std::vector<std::string> found = settings_reads_outside_config(root);
  fs::remove_all(root);
  std::sort(found.begin(), found.end());
  const std::vector<std::string> expected = {
      "backends/cpu/reads.h:2: int t = config::get_int(\"A\", 1);",
      "graph/reads.cpp:3: auto v = ::getenv(\"X\");",
      "samples/secure.cpp:1: auto s = secure_getenv (\"B\");"};
  EXPECT_EQ(found, expected) << joined(found);
}

}  // namespace
}  // namespace axle
