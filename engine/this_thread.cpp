// engine: objects kept for the life of their thread.
#include "axle/engine/this_thread.h"

#include <cstdint>
#include <vector>

namespace axle {
namespace {

// A trivially destructible flag stays readable after the keeper is gone (objects released
// during thread exit may ask to keep more).
enum class KeeperState : uint8_t { kUnborn, kAlive, kDead };
thread_local constinit KeeperState tls_keeper_state = KeeperState::kUnborn;

struct Keeper {
  std::vector<std::shared_ptr<void>> kept;
  Keeper() { tls_keeper_state = KeeperState::kAlive; }
  ~Keeper() {
    while (!kept.empty()) {
      std::shared_ptr<void> last = std::move(kept.back());
      kept.pop_back();
      last.reset();  // may keep more: they go in this loop too
    }
    tls_keeper_state = KeeperState::kDead;
  }
};
thread_local Keeper tls_keeper;

}  // namespace

void keep_until_thread_exit(std::shared_ptr<void> object) {
  if (tls_keeper_state == KeeperState::kDead) {
    // The thread is past its keeper: the object lives on (a leak at exit) rather than die under
    // a caller that has just bound to it.
    new std::shared_ptr<void>(std::move(object));
    return;
  }
  tls_keeper.kept.push_back(std::move(object));
}

}  // namespace axle
