# axle::axle, the whole library in one target, and the rules of `cmake --install`: the public
# headers (cmake/public_headers.txt) under include/axle/, the libraries (the parts' static
# archives, or with -DBUILD_SHARED_LIBS=ON libaxle.so), a CMake package (find_package(axle) ->
# axle::axle) and a pkg-config file. README.md, "Use axle in your project", says how a program
# uses them; tests/install/ installs a build and builds examples/consumer/ against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# In link order: each library before the ones it needs (a static link reads them in turn).
set(axle_part_libraries axle_io axle_actors_parallel axle_actors_host axle_actors_runtime
  axle_actors_compiler axle_graph_reference axle_passes axle_graph_formats axle_backends axle_graph
  axle_engine)

if(BUILD_SHARED_LIBS)
  # libaxle.so: every part's archive whole, so the program's link needs nothing of axle's but it.
  # The SONAME carries the minor version while axle is 0.x, where a minor version may change the
  # API (libaxle.so.0.1).
  file(WRITE ${PROJECT_BINARY_DIR}/package/libaxle.cpp
    "// libaxle.so: the parts' archives linked whole (cmake/AxleInstall.cmake).\n"
    "namespace axle {\nextern const char kLibraryVersion[];\n"
    "const char kLibraryVersion[] = \"${PROJECT_VERSION}\";\n}  // namespace axle\n")
  add_library(axle_axle SHARED ${PROJECT_BINARY_DIR}/package/libaxle.cpp)
  set_target_properties(axle_axle PROPERTIES OUTPUT_NAME axle VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  # The archives between --whole-archive and --no-whole-archive (CMake's WHOLE_ARCHIVE feature
  # refuses the parts, which also reach the link through each other); what they link follows.
  target_link_libraries(axle_axle
    PRIVATE -Wl,--whole-archive ${axle_part_libraries} -Wl,--no-whole-archive
    PUBLIC axle::usage fmt::fmt)
  target_include_directories(axle_axle PUBLIC ${axle_build_include_dirs})
else()
  # axle::axle: everything axle.h and io/ need. Each library is exported too, as axle::<folder>
  # (axle::engine, axle::graph, axle::actors_host, ...), the names the build tree uses.
  add_library(axle_axle INTERFACE)
  target_link_libraries(axle_axle INTERFACE axle::actors axle::io)
endif()
add_library(axle::axle ALIAS axle_axle)

if(NOT AXLE_INSTALL)
  return()
endif()

if(BUILD_SHARED_LIBS)
  set(axle_installed_libraries axle_axle)
  set(axle_interface_targets axle_usage)
else()
  set(axle_installed_libraries ${axle_part_libraries})
  # Targets without a library file of their own: axle::actors is its four parts.
  set(axle_interface_targets axle_actors axle_usage axle_axle)
endif()
foreach(target IN LISTS axle_installed_libraries axle_interface_targets)
  string(REGEX REPLACE "^axle_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

# A program includes <axle/axle.h>; axle's headers include each other as "axle/graph/tensor.h":
# PREFIX/include alone is on the installed targets' include path.
install(TARGETS ${axle_installed_libraries} ${axle_interface_targets}
  EXPORT axleTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The public headers, cmake/public_headers.txt's list, each under include/axle/ at its place in
# the tree; no other header is installed.
file(STRINGS ${PROJECT_SOURCE_DIR}/cmake/public_headers.txt axle_public_headers
  REGEX "^[^#]")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/cmake/public_headers.txt)
foreach(header IN LISTS axle_public_headers)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/axle/${folder})
endforeach()

set(axle_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/axle)
install(EXPORT axleTargets NAMESPACE axle:: DESTINATION ${axle_cmake_dir})
# What the package's users link in turn: a static axle, what its archives link.
if(BUILD_SHARED_LIBS)
  set(AXLE_PACKAGE_STATIC OFF)
else()
  set(AXLE_PACKAGE_STATIC ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/axleConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/axleConfig.cmake
  INSTALL_DESTINATION ${axle_cmake_dir})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/axleConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/axleConfig.cmake
  ${PROJECT_BINARY_DIR}/package/axleConfigVersion.cmake
  DESTINATION ${axle_cmake_dir})

# pkg-config. Static archives: Libs names what they link in turn (zlib, protobuf and MPI by the
# files this build linked, fmt through Requires, whose headers engine/log.h includes); libaxle.so
# links those itself, so they are only its Libs.private. No compile flag of axle's own build. The
# prefix is found from the file's own place, so `cmake --install --prefix P` may choose it.
file(RELATIVE_PATH axle_pc_prefix /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" axle_pc_prefix "${axle_pc_prefix}")
set(axle_pc_libs "")
set(axle_pc_libs_private "")
if(BUILD_SHARED_LIBS)
  set(axle_pc_libs " -laxle")
else()
  foreach(library IN LISTS axle_installed_libraries)
    string(APPEND axle_pc_libs " -l${library}")
  endforeach()
endif()
# MPI as actors/CMakeLists.txt finds it (its result is cached), for the files it linked.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)
set(axle_pc_system_libs ${ZLIB_LIBRARIES} ${Protobuf_LIBRARIES} ${MPI_CXX_LIBRARIES})
list(REMOVE_ITEM axle_pc_system_libs optimized debug general)
list(REMOVE_DUPLICATES axle_pc_system_libs)
foreach(library IN LISTS axle_pc_system_libs)
  if(BUILD_SHARED_LIBS)
    string(APPEND axle_pc_libs_private " ${library}")
  else()
    string(APPEND axle_pc_libs " ${library}")
  endif()
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
