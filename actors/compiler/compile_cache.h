// actors: the in-memory cache of compiled programs, keyed by graph hash, least recently used
// out first (XLA_COMPILATION_CACHE_SIZE entries, default 2048). Hosts read it directly so a hit
// never waits for the compiler; the compiler fills it.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

#include "axle/backends/executable.h"

namespace axle {

class CompileCache {
 public:
  explicit CompileCache(std::size_t capacity) : capacity_(capacity ? capacity : 1) {}

  /// The program for `hash`, or null.
  IntrusivePtr<Executable> find(uint64_t hash);
  void insert(uint64_t hash, IntrusivePtr<Executable> program);
  [[nodiscard]] std::size_t size() const;
  void clear();

 private:
  using Entry = std::pair<uint64_t, IntrusivePtr<Executable>>;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> entries_;
};

}  // namespace axle
