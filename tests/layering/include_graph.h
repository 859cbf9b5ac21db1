// tests/layering: the include graph of a source tree, held against cmake/layers.txt — which part
// each file belongs to, the includes that reach a part above their own, and the files and units
// (a .cpp with its header) that include each other in a circle.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace axle::layering {

/// The parts in order, lowest first, as cmake/layers.txt lists them (one a line; '#' starts a
/// comment). Throws std::runtime_error naming the file when it cannot be read or lists none.
[[nodiscard]] std::vector<std::string> read_parts(const std::filesystem::path& layers_file);

/// The lines of a list like cmake/layers.txt or cmake/public_headers.txt: the first word of each
/// ('#' starts a comment). Throws std::runtime_error naming `what` and the file when it cannot be
/// read or lists nothing.
[[nodiscard]] std::vector<std::string> read_list(const std::filesystem::path& file,
                                                 const std::string& what);

/// One `#include "..."` of one file, both paths relative to the tree's root. axle's library
/// headers are included from the prefix axle/ ("axle/graph/tensor.h"), the name they have once
/// installed; `to` is the path without it.
struct Include {
  std::string from;
  int line = 0;
  std::string to;
};

/// Every .h and .cpp under the parts' top folders, and each `#include "..."` among them that
/// names a file of the tree (a generated or system header is none of its files).
struct IncludeGraph {
  std::vector<std::string> files;
  std::vector<Include> includes;
};
[[nodiscard]] IncludeGraph scan_tree(const std::filesystem::path& root,
                                     const std::vector<std::string>& parts);

/// The part `file` belongs to: the longest part its path starts with ("" when none does).
[[nodiscard]] std::string part_of(const std::string& file, const std::vector<std::string>& parts);

/// One line for each file that belongs to no part, and for each include that reaches a part
/// listed after its own: "actors/runtime/wire.h:7 includes io/checkpoint.h: io is above
/// actors/runtime".
[[nodiscard]] std::vector<std::string> layering_violations(const IncludeGraph& graph,
                                                           const std::vector<std::string>& parts);

/// The groups of files that include each other in a circle (each sorted), when `by_unit` is
/// false; with it, of units: a file's unit is its path without the extension, so a .cpp and its
/// header are one.
[[nodiscard]] std::vector<std::vector<std::string>> include_cycles(const IncludeGraph& graph,
                                                                   bool by_unit);

/// "graph/passes/partitioner.cpp has 1524 lines" for each of `files` (relative to `root`) longer
/// than `max_lines`.
[[nodiscard]] std::vector<std::string> files_longer_than(const std::filesystem::path& root,
                                                         const std::vector<std::string>& files,
                                                         int max_lines);

/// "samples/train_gpt.cpp:384 train_replica has 67 lines" for each function defined at a file's
/// outer level (its first line unindented, clang-format style, its body closed by a line "}")
/// whose body is longer than `max_lines`. Member functions and lambdas are not counted.
[[nodiscard]] std::vector<std::string> functions_longer_than(const std::filesystem::path& root,
                                                             const std::vector<std::string>& files,
                                                             int max_lines);

/// True for axle.h and the files of the library's folders (engine, graph, backends, actors, io):
/// the ones included as "axle/<path>".
[[nodiscard]] bool is_library_file(const std::string& file);

/// "samples/train_gpt.cpp:12 includes graph/tensor.h: write axle/graph/tensor.h" for each
/// include, in `files` (relative to `root`), of a library file not spelled from the prefix axle/.
[[nodiscard]] std::vector<std::string> unprefixed_includes(const std::filesystem::path& root,
                                                           const std::vector<std::string>& files);

/// The library files `start` (relative to `root`) reaches through its includes, itself among
/// them, sorted; with, for each, the first file found including it ("" for `start`).
struct Reached {
  std::string file;
  std::string included_by;
};
[[nodiscard]] std::vector<Reached> include_closure(const std::filesystem::path& root,
                                                   const std::string& start);

/// What differs between the files root/axle.h reaches and the public headers `listed`: "graph/x.h
/// (included by graph/tensor.h) is not in the public list" and "graph/y.h is in the public list
/// but axle.h does not reach it".
[[nodiscard]] std::vector<std::string> public_list_mismatches(
    const std::filesystem::path& root, const std::vector<std::string>& listed);

}  // namespace axle::layering
