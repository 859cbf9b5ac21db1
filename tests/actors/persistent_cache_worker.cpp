// A second process for the persistent compile cache tests: runs the small program with the cache
// in argv[1] (or where XLA_PERSISTENT_CACHE_PATH says, without an argument) and prints its values
// and compile counters, one "name value..." line each.
#include <cstdio>
#include <exception>

#include "persistent_cache_program.h"

int main(int argc, char** argv) {
  try {
    if (argc > 1) axle::initialize_cache(argv[1]);
    const axle::small_program::Values values = axle::small_program::run();
    std::printf("activations");
    for (float v : values.activations) std::printf(" %g", v);
    std::printf("\nrow_sums");
    for (float v : values.row_sums) std::printf(" %g", v);
    std::printf("\n");
    for (const char* name : {"UncachedCompile", "PersistentCacheHit", "PersistentCacheMiss"}) {
      std::printf("%s %lld\n", name, static_cast<long long>(axle::counter_value(name).value_or(0)));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "persistent_cache_worker: %s\n", e.what());
    return 1;
  }
}
