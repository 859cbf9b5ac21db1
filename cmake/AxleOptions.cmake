# Compile options, carried by INTERFACE targets rather than global flags.
#
# axle::options holds the flags of axle's own code (warnings, -march, a sanitizer build's
# instrumentation). Every axle library, test, benchmark and sample links it PRIVATE, so a program
# that links axle compiles its own code with its own flags.
#
# axle::usage holds what such a program needs in turn; axle::engine, which every axle library
# links, passes it on PUBLIC:
# - C++20: axle's headers use it.
# - Threads: axle's libraries are static archives that run threads, so the program's link must
#   bring the thread library.
# - In a sanitizer build, the sanitizer's link flag. axle's libraries are static archives of
#   instrumented code that calls the sanitizer runtime (__asan_*, __tsan_*); a program linked
#   without the flag fails on those undefined symbols. The compile flag stays private: the
#   program decides whether its own code is instrumented.
# - AXLE_TSAN in a thread-sanitizer build: it selects which inline store_load_fence
#   (engine/fence.h) axle's headers define, and every translation unit must define it the same.
add_library(axle_usage INTERFACE)
add_library(axle::usage ALIAS axle_usage)
find_package(Threads REQUIRED)
target_link_libraries(axle_usage INTERFACE Threads::Threads)
target_compile_features(axle_usage INTERFACE cxx_std_20)

add_library(axle_options INTERFACE)
add_library(axle::options ALIAS axle_options)
target_compile_options(axle_options INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter
  -Wno-missing-field-initializers)  # designated initializers leave fields to their defaults on purpose
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND AXLE_ARCH)
  target_compile_options(axle_options INTERFACE -march=${AXLE_ARCH})
endif()
# Eigen's GEMM packs a block of its right-hand operand (up to a few hundred KiB for the layers of
# the samples) into a buffer it takes from malloc when larger than this limit, once per product:
# on the stack instead (every thread of axle's has the default 8 MiB), training steps do not
# churn the allocator with such blocks. Set for all of axle's code, so every translation unit
# instantiates Eigen alike.
target_compile_definitions(axle_options INTERFACE EIGEN_STACK_ALLOCATION_LIMIT=524288)
# Code compiled with axle's flags links as code that uses axle does (the sanitizer runtime).
target_link_libraries(axle_options INTERFACE axle::usage)

if(AXLE_SANITIZE STREQUAL "address")
  target_compile_options(axle_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(axle_usage INTERFACE -fsanitize=address,undefined)
elseif(AXLE_SANITIZE STREQUAL "thread")
  # -Wno-tsan: the lock-free queue uses std::atomic_thread_fence, which the sanitizer does not
  # model; axle's own fences go through detail::store_load_fence (engine/fence.h).
  target_compile_options(axle_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan)
  target_link_options(axle_usage INTERFACE -fsanitize=thread)
  target_compile_definitions(axle_usage INTERFACE AXLE_TSAN=1)
elseif(AXLE_SANITIZE)
  message(FATAL_ERROR "AXLE_SANITIZE must be 'address', 'thread' or empty, not '${AXLE_SANITIZE}'")
endif()

# Precompiled headers: the standard library and fmt, which nearly every source file includes,
# parsed once instead of once per file. engine/ and backends/ compile their own (engine's
# definitions differ from the others', and GCC refuses a header precompiled under other macros);
# graph/ adds the tensor and its ops, and the parts above it, whose files nearly all include
# those, reuse graph/'s. A file compiled with other flags (an ISA's kernels) parses as usual.
option(AXLE_PRECOMPILED_HEADERS "Precompile the headers most of axle's sources include" ON)
set(axle_precompiled_headers
  <algorithm> <array> <atomic> <chrono> <cstddef> <cstdint> <cstring> <filesystem> <functional>
  <map> <memory> <mutex> <optional> <span> <stdexcept> <string> <string_view> <unordered_map>
  <utility> <vector> <fmt/format.h>)
# axle_precompile_headers(target [header...]): the set above and the target's own additions.
function(axle_precompile_headers target)
  if(AXLE_PRECOMPILED_HEADERS)
    target_precompile_headers(${target} PRIVATE ${axle_precompiled_headers} ${ARGN})
  endif()
endfunction()
# axle_reuse_precompiled_headers(target): graph/'s, for a part above it.
function(axle_reuse_precompiled_headers target)
  if(AXLE_PRECOMPILED_HEADERS)
    target_precompile_headers(${target} REUSE_FROM axle_graph)
  endif()
endfunction()
