# axle::axle, the whole library in one target, and the rules of `cmake --install`: headers under
# include/axle/, the static libraries, a CMake package (find_package(axle) -> axle::axle) and a
# pkg-config file. README.md, "Use axle in your project", says how a program uses them;
# tests/install/ installs a build and builds examples/consumer/ against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# axle::axle: everything axle.h and io/ need. Each library is exported too, as axle::<folder>
# (axle::engine, axle::graph, axle::actors_host, ...), the names the build tree uses.
add_library(axle_axle INTERFACE)
add_library(axle::axle ALIAS axle_axle)
target_link_libraries(axle_axle INTERFACE axle::actors axle::io)

if(NOT AXLE_INSTALL)
  return()
endif()

# In link order: each library before the ones it needs (a static link reads them in turn).
set(axle_installed_libraries axle_io axle_actors_parallel axle_actors_host axle_actors_runtime
  axle_actors_compiler axle_graph_reference axle_passes axle_graph_formats axle_backends axle_graph
  axle_engine)
# Targets without a library file of their own: axle::actors is its four parts.
set(axle_interface_targets axle_actors axle_usage axle_axle)
foreach(target IN LISTS axle_installed_libraries axle_interface_targets)
  string(REGEX REPLACE "^axle_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

# axle's own headers include each other from the source root ("graph/tensor.h"), a program
# includes <axle/axle.h>: both roots are on the installed targets' include path.
set(axle_include_root ${CMAKE_INSTALL_INCLUDEDIR}/axle)
install(TARGETS ${axle_installed_libraries} ${axle_interface_targets}
  EXPORT axleTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${axle_include_root})

# The headers of the library folders. Not installed: backends/testing/ (a backend for axle's
# tests; its library is not installed either), the headers private to one library's .cpp files
# (graph/reference/op_families.h, graph/passes/partitioner_internal.h, actors/runtime/mpi_loop.h,
# io/checkpoint_step.h, io/checkpoint_writer.h)
# and the CPU kernels' headers that include Eigen, which no other header includes.
install(FILES axle.h DESTINATION ${axle_include_root})
install(DIRECTORY engine graph backends actors io
  DESTINATION ${axle_include_root}
  FILES_MATCHING PATTERN "*.h"
  PATTERN "testing" EXCLUDE
  PATTERN "op_families.h" EXCLUDE
  PATTERN "partitioner_internal.h" EXCLUDE
  PATTERN "mpi_loop.h" EXCLUDE
  PATTERN "checkpoint_step.h" EXCLUDE
  PATTERN "checkpoint_writer.h" EXCLUDE
  REGEX "/backends/cpu/(element|float_math|reducer)\\.h$" EXCLUDE)

set(axle_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/axle)
install(EXPORT axleTargets NAMESPACE axle:: DESTINATION ${axle_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/axleConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/axleConfig.cmake
  INSTALL_DESTINATION ${axle_cmake_dir})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/axleConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/axleConfig.cmake
  ${PROJECT_BINARY_DIR}/package/axleConfigVersion.cmake
  DESTINATION ${axle_cmake_dir})

# pkg-config. The libraries are static archives, so Libs names what they link in turn (zlib,
# protobuf and MPI by the files this build linked, fmt through Requires, whose headers
# engine/log.h includes); no compile flag of axle's own build. The prefix is found from the file's
# own place, so `cmake --install --prefix P` may choose it.
file(RELATIVE_PATH axle_pc_prefix /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" axle_pc_prefix "${axle_pc_prefix}")
set(axle_pc_libs "")
foreach(library IN LISTS axle_installed_libraries)
  string(APPEND axle_pc_libs " -l${library}")
endforeach()
# MPI as actors/CMakeLists.txt finds it (its result is cached), for the files it linked.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)
set(axle_pc_system_libs ${ZLIB_LIBRARIES} ${Protobuf_LIBRARIES} ${MPI_CXX_LIBRARIES})
list(REMOVE_ITEM axle_pc_system_libs optimized debug general)
list(REMOVE_DUPLICATES axle_pc_system_libs)
foreach(library IN LISTS axle_pc_system_libs)
  string(APPEND axle_pc_libs " ${library}")
endforeach()
set(axle_pc_cflags "")
if(AXLE_SANITIZE STREQUAL "address")
  string(APPEND axle_pc_libs " -fsanitize=address,undefined")
elseif(AXLE_SANITIZE STREQUAL "thread")
  string(APPEND axle_pc_libs " -fsanitize=thread")
  set(axle_pc_cflags " -DAXLE_TSAN=1")
endif()
string(APPEND axle_pc_libs " -pthread")
configure_file(${PROJECT_SOURCE_DIR}/cmake/axle.pc.in ${PROJECT_BINARY_DIR}/package/axle.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/axle.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
