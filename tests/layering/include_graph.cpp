// tests/layering: reading a tree's includes and holding them against its parts.
#include "include_graph.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

namespace axle::layering {
namespace fs = std::filesystem;
namespace {

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

// The quoted path of an `#include "..."` line, or "" for any other line.
std::string quoted_include(const std::string& line) {
  std::size_t at = line.find_first_not_of(" \t");
  if (at == std::string::npos || line[at] != '#') return {};
  at = line.find_first_not_of(" \t", at + 1);
  if (at == std::string::npos || line.compare(at, 7, "include") != 0) return {};
  const std::size_t open = line.find_first_not_of(" \t", at + 7);
  if (open == std::string::npos || line[open] != '"') return {};
  const std::size_t close = line.find('"', open + 1);
  if (close == std::string::npos) return {};
  return line.substr(open + 1, close - open - 1);
}

std::string top_folder(const std::string& part) { return part.substr(0, part.find('/')); }

constexpr std::string_view kPrefix = "axle/";

// An include's path in the tree: "axle/graph/tensor.h" names graph/tensor.h.
std::string without_prefix(std::string path) {
  if (path.starts_with(kPrefix)) path.erase(0, kPrefix.size());
  return path;
}

std::string unit_of(const std::string& file) { return file.substr(0, file.rfind('.')); }

// Strongly connected components of more than one node (Tarjan's, iterative: a long include
// chain must not exhaust the stack).
std::vector<std::vector<std::string>> components(
    const std::map<std::string, std::set<std::string>>& edges) {
  std::map<std::string, int> index, low;
  std::set<std::string> on_stack;
  std::vector<std::string> stack;
  std::vector<std::vector<std::string>> found;
  int next = 0;
  struct Frame {
    std::string node;
    std::vector<std::string> targets;
    std::size_t at = 0;
  };
  auto targets_of = [&](const std::string& node) {
    const auto it = edges.find(node);
    return it == edges.end() ? std::vector<std::string>{}
                             : std::vector<std::string>(it->second.begin(), it->second.end());
  };
  for (const auto& [root, unused] : edges) {
    if (index.contains(root)) continue;
    std::vector<Frame> frames;
    auto enter = [&](const std::string& node) {
      index[node] = low[node] = next++;
      stack.push_back(node);
      on_stack.insert(node);
      frames.push_back(Frame{node, targets_of(node)});
    };
    enter(root);
    while (!frames.empty()) {
      Frame& frame = frames.back();
      if (frame.at < frame.targets.size()) {
        const std::string target = frame.targets[frame.at++];
        if (!index.contains(target)) {
          enter(target);
        } else if (on_stack.contains(target)) {
          low[frame.node] = std::min(low[frame.node], index[target]);
        }
        continue;
      }
      const std::string node = frame.node;
      frames.pop_back();
      if (!frames.empty()) low[frames.back().node] = std::min(low[frames.back().node], low[node]);
      if (low[node] != index[node]) continue;
      std::vector<std::string> component;
      std::string member;
      do {
        member = stack.back();
        stack.pop_back();
        on_stack.erase(member);
        component.push_back(member);
      } while (member != node);
      if (component.size() > 1) {
        std::sort(component.begin(), component.end());
        found.push_back(std::move(component));
      }
    }
  }
  return found;
}

}  // namespace

std::vector<std::string> read_list(const fs::path& file, const std::string& what) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + what + " " + file.string());
  std::vector<std::string> items;
  std::string line;
  while (std::getline(in, line)) {
    const std::string text = trim(std::string_view(line).substr(0, line.find('#')));
    if (!text.empty()) items.push_back(text.substr(0, text.find_first_of(" \t")));
  }
  if (items.empty()) throw std::runtime_error(what + " " + file.string() + " is empty");
  return items;
}

std::vector<std::string> read_parts(const fs::path& layers_file) {
  return read_list(layers_file, "the parts list");
}

IncludeGraph scan_tree(const fs::path& root, const std::vector<std::string>& parts) {
  std::set<std::string> folders;
  for (const std::string& part : parts) folders.insert(top_folder(part));
  IncludeGraph graph;
  for (const std::string& folder : folders) {
    if (!fs::is_directory(root / folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string extension = entry.path().extension().string();
      if (!entry.is_regular_file() || (extension != ".h" && extension != ".cpp")) continue;
      graph.files.push_back(entry.path().lexically_relative(root).generic_string());
    }
  }
  std::sort(graph.files.begin(), graph.files.end());
  const std::set<std::string> known(graph.files.begin(), graph.files.end());
  for (const std::string& file : graph.files) {
    std::ifstream in(root / file);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::string target = without_prefix(quoted_include(line));
      if (known.contains(target))
        graph.includes.push_back(Include{file, number, std::move(target)});
    }
  }
  return graph;
}

std::string part_of(const std::string& file, const std::vector<std::string>& parts) {
  std::string best;
  for (const std::string& part : parts) {
    if (file.starts_with(part + "/") && part.size() > best.size()) best = part;
  }
  return best;
}

std::vector<std::string> layering_violations(const IncludeGraph& graph,
                                             const std::vector<std::string>& parts) {
  std::map<std::string, std::size_t> rank;
  for (std::size_t i = 0; i < parts.size(); ++i) rank[parts[i]] = i;
  std::vector<std::string> found;
  for (const std::string& file : graph.files) {
    if (part_of(file, parts).empty()) found.push_back(file + " belongs to no part");
  }
  for (const Include& include : graph.includes) {
    const std::string from = part_of(include.from, parts);
    const std::string to = part_of(include.to, parts);
    if (from.empty() || to.empty() || rank[to] <= rank[from]) continue;
    found.push_back(include.from + ":" + std::to_string(include.line) + " includes " + include.to +
                    ": " + to + " is above " + from);
  }
  return found;
}

std::vector<std::vector<std::string>> include_cycles(const IncludeGraph& graph, bool by_unit) {
  std::map<std::string, std::set<std::string>> edges;
  for (const std::string& file : graph.files) edges[by_unit ? unit_of(file) : file];
  for (const Include& include : graph.includes) {
    const std::string from = by_unit ? unit_of(include.from) : include.from;
    const std::string to = by_unit ? unit_of(include.to) : include.to;
    if (from != to) edges[from].insert(to);
  }
  return components(edges);
}

std::vector<std::string> files_longer_than(const fs::path& root,
                                           const std::vector<std::string>& files, int max_lines) {
  std::vector<std::string> found;
  for (const std::string& file : files) {
    std::ifstream in(root / file);
    int count = 0;
    for (std::string line; std::getline(in, line);) ++count;
    if (count > max_lines) found.push_back(file + " has " + std::to_string(count) + " lines");
  }
  return found;
}

namespace {

bool indented(const std::string& line) {
  return !line.empty() && std::isspace(static_cast<unsigned char>(line[0]));
}

// Whether a signature (a declaration's lines joined, from an unindented first line) opens a
// function's body: `... name(...) ... {`, not a namespace, type, initializer or comment.
bool opens_function(const std::string& signature) {
  if (signature.empty() || signature.back() != '{') return false;
  for (const char* not_a_function : {"namespace", "struct", "class", "enum", "union", "//", "#"}) {
    if (signature.starts_with(not_a_function)) return false;
  }
  const std::size_t open = signature.find('(');
  return open != std::string::npos && signature.find(')', open) != std::string::npos &&
         signature.substr(0, open).find('=') == std::string::npos;
}

// The function's name: the word before the first '(' of its signature.
std::string function_name(const std::string& signature) {
  const std::size_t open = signature.find('(');
  std::size_t begin = signature.find_last_of(" *&:", open);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return signature.substr(begin, open - begin);
}

}  // namespace

std::vector<std::string> functions_longer_than(const fs::path& root,
                                               const std::vector<std::string>& files,
                                               int max_lines) {
  std::vector<std::string> found;
  for (const std::string& file : files) {
    std::ifstream in(root / file);
    std::vector<std::string> text;
    for (std::string line; std::getline(in, line);) text.push_back(line);
    for (std::size_t first = 0; first < text.size(); ++first) {
      if (text[first].empty() || indented(text[first])) continue;
      // The signature: this line and the indented ones wrapped after it, up to a '{' or ';'.
      std::string signature = text[first];
      std::size_t last = first;
      while (!signature.ends_with("{") && !signature.ends_with(";") && last + 1 < text.size() &&
             indented(text[last + 1])) {
        signature += " " + text[++last];
      }
      if (!opens_function(signature)) continue;
      std::size_t end = last + 1;
      while (end < text.size() && text[end] != "}") ++end;
      const std::size_t body = end - last - 1;
      if (static_cast<int>(body) > max_lines) {
        found.push_back(file + ":" + std::to_string(first + 1) + " " + function_name(signature) +
                        " has " + std::to_string(body) + " lines");
      }
      first = end;
    }
  }
  return found;
}

bool is_library_file(const std::string& file) {
  if (file == "axle.h") return true;
  const std::string folder = top_folder(file);
  return folder != file && (folder == "engine" || folder == "graph" || folder == "backends" ||
                            folder == "actors" || folder == "io");
}

std::vector<std::string> unprefixed_includes(const fs::path& root,
                                             const std::vector<std::string>& files) {
  std::vector<std::string> found;
  for (const std::string& file : files) {
    std::ifstream in(root / file);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const std::string target = quoted_include(line);
      if (target.empty() || target.starts_with(kPrefix)) continue;
      if (is_library_file(target) && fs::exists(root / target)) {
        found.push_back(file + ":" + std::to_string(number) + " includes " + target + ": write " +
                        std::string(kPrefix) + target);
      }
    }
  }
  return found;
}

std::vector<Reached> include_closure(const fs::path& root, const std::string& start) {
  std::map<std::string, std::string> reached{{start, ""}};
  std::vector<std::string> pending{start};
  while (!pending.empty()) {
    const std::string file = pending.back();
    pending.pop_back();
    std::ifstream in(root / file);
    for (std::string line; std::getline(in, line);) {
      const std::string target = quoted_include(line);
      if (!target.starts_with(kPrefix)) continue;
      const std::string path = without_prefix(target);
      if (reached.emplace(path, file).second) pending.push_back(path);
    }
  }
  std::vector<Reached> closure;
  for (const auto& [file, by] : reached) closure.push_back(Reached{file, by});
  return closure;
}

std::vector<std::string> public_list_mismatches(const fs::path& root,
                                                const std::vector<std::string>& listed) {
  const std::set<std::string> public_headers(listed.begin(), listed.end());
  std::set<std::string> reached_files;
  std::vector<std::string> found;
  for (const Reached& reached : include_closure(root, "axle.h")) {
    reached_files.insert(reached.file);
    if (reached.file == "axle.h" || public_headers.contains(reached.file)) continue;
    found.push_back(reached.file + " (included by " + reached.included_by +
                    ") is not in the public list");
  }
  for (const std::string& header : listed) {
    if (!reached_files.contains(header))
      found.push_back(header + " is in the public list but axle.h does not reach it");
  }
  return found;
}

}  // namespace axle::layering
