# Compile options shared by every axle target, carried by INTERFACE targets rather than global flags.
add_library(axle_options INTERFACE)
add_library(axle::options ALIAS axle_options)
target_compile_options(axle_options INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter
  -Wno-missing-field-initializers)  # designated initializers leave fields to their defaults on purpose
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND AXLE_ARCH)
  target_compile_options(axle_options INTERFACE -march=${AXLE_ARCH})
endif()

find_package(Threads REQUIRED)
target_link_libraries(axle_options INTERFACE Threads::Threads)

if(AXLE_SANITIZE STREQUAL "address")
  target_compile_options(axle_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(axle_options INTERFACE -fsanitize=address,undefined)
elseif(AXLE_SANITIZE STREQUAL "thread")
  # -Wno-tsan: the lock-free queue uses std::atomic_thread_fence, which the sanitizer does not
  # model; axle's own fences go through detail::store_load_fence (engine/fence.h).
  target_compile_options(axle_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan)
  target_link_options(axle_options INTERFACE -fsanitize=thread)
  target_compile_definitions(axle_options INTERFACE AXLE_TSAN=1)
elseif(AXLE_SANITIZE)
  message(FATAL_ERROR "AXLE_SANITIZE must be 'address', 'thread' or empty, not '${AXLE_SANITIZE}'")
endif()
