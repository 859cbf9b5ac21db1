// actors: LRU compile cache.
#include "axle/actors/compiler/compile_cache.h"

namespace axle {

IntrusivePtr<Executable> CompileCache::find(uint64_t hash) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return {};
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

void CompileCache::insert(uint64_t hash, IntrusivePtr<Executable> program) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(hash); it != entries_.end()) {
    it->second->second = std::move(program);
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  order_.emplace_front(hash, std::move(program));
  entries_[hash] = order_.begin();
  while (entries_.size() > capacity_) {
    entries_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::size_t CompileCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void CompileCache::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
  order_.clear();
}

}  // namespace axle
