# Every dependency is a Debian -dev package; nothing is vendored or downloaded.
# ../shared/PACKAGES.md says where Debian 12 puts each one.

# asio (libasio-dev): header only, no CMake config.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(axle_asio INTERFACE)
add_library(axle::asio ALIAS axle_asio)
target_include_directories(axle_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(axle_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)

# moodycamel concurrentqueue (libconcurrentqueue-dev): header only, no CMake config.
find_path(CONCURRENTQUEUE_INCLUDE_DIR concurrentqueue/concurrentqueue.h REQUIRED)
add_library(axle_concurrentqueue INTERFACE)
add_library(axle::concurrentqueue ALIAS axle_concurrentqueue)
target_include_directories(axle_concurrentqueue SYSTEM INTERFACE ${CONCURRENTQUEUE_INCLUDE_DIR})

find_package(fmt REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(Protobuf REQUIRED)
find_package(ZLIB REQUIRED)                # zlib1g-dev: gzip IDX files
find_package(nlohmann_json 3.10 REQUIRED)  # nlohmann-json3-dev: safetensors headers
find_package(CLI11 REQUIRED)               # libcli11-dev: flags of samples and benchmarks

if(AXLE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(AXLE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
