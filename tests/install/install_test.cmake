# Installs axle's build into WORK_DIR/prefix with `cmake --install`, checks what was installed
# (headers under include/axle/, the CMake package, the pkg-config file, no flag of axle's own
# build in what a program inherits), then builds and runs examples/consumer/ against it through
# find_package(axle) and tests/install/pkg_config_main.cpp through pkg-config. axle itself is not
# rebuilt: the install copies what BUILD_DIR holds.
#
#   cmake -DBUILD_DIR=<axle's build> -DAXLE_SOURCE=<axle's source> -DAXLE_VERSION=<its version>
#         -DWORK_DIR=<scratch dir>
#         -DGENERATOR=<generator> [-DMAKE_PROGRAM=<path>] [-DCXX_COMPILER=<path>]
#         [-DLAUNCHER=<ccache>] [-DPKG_CONFIG=<path>] [-DSANITIZE=address|thread]
#         -P install_test.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR AXLE_SOURCE AXLE_VERSION WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: pass -D${var}=...")
  endif()
endforeach()

set(failures "")
macro(fail what)
  string(APPEND failures "\n  - ${what}")
endmacro()
# Runs a command; stops the test with its output unless it exits 0. Sets `output`.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${ARGN}\n${out}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# ---- (a) The installed tree -----------------------------------------------------------------
foreach(file include/axle/axle.h include/axle/graph/tensor.h include/axle/io/data_loader.h)
  if(NOT EXISTS ${prefix}/${file})
    fail("${file} is not installed")
  endif()
endforeach()
file(GLOB_RECURSE config_files ${prefix}/*/axleConfig.cmake)
file(GLOB_RECURSE version_files ${prefix}/*/axleConfigVersion.cmake)
file(GLOB_RECURSE targets_files ${prefix}/*/axleTargets.cmake)
file(GLOB_RECURSE pc_files ${prefix}/*/pkgconfig/axle.pc)
foreach(kind config_files version_files targets_files pc_files)
  list(LENGTH ${kind} count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "expected one installed file for ${kind}, found ${count}: ${${kind}}")
  endif()
endforeach()
# Headers internal to one library, which no installed header includes.
foreach(file include/axle/graph/reference/op_families.h
    include/axle/graph/passes/partitioner_internal.h include/axle/actors/runtime/mpi_loop.h
    include/axle/backends/testing)
  if(EXISTS ${prefix}/${file})
    fail("${file} is installed: it is internal to its library")
  endif()
endforeach()
foreach(folder tests samples benchmarks examples)
  if(EXISTS ${prefix}/include/axle/${folder})
    fail("include/axle/${folder}/ is installed: only the libraries' headers should be")
  endif()
endforeach()
# No installed header needs a library the package does not give its users.
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/*)
list(LENGTH headers header_count)
foreach(header IN LISTS headers)
  if(NOT header MATCHES "^axle/.*\\.h$")
    fail("installed under include/ but not a header under include/axle/: ${header}")
    continue()
  endif()
  file(STRINGS ${prefix}/include/${header} includes REGEX "^#include *<(Eigen|unsupported/Eigen|asio|google/protobuf|nlohmann)")
  if(includes)
    fail("${header} includes ${includes}, which the installed package does not provide")
  endif()
endforeach()

# The version file: find_package(axle X.Y) takes this version for X.Y and older minor versions
# of 0.Y's (a 0.x minor version may change the API), not for another major version.
function(version_compatible wanted out)
  set(PACKAGE_FIND_VERSION ${wanted})
  string(REPLACE "." ";" parts ${wanted})
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  include(${version_files})
  set(${out} "${PACKAGE_VERSION_COMPATIBLE}" PARENT_SCOPE)
  if(NOT PACKAGE_VERSION STREQUAL AXLE_VERSION)
    fail("axleConfigVersion.cmake gives version ${PACKAGE_VERSION}, axle is ${AXLE_VERSION}")
  endif()
endfunction()
string(REPLACE "." ";" parts ${AXLE_VERSION})
list(GET parts 0 major)
list(GET parts 1 minor)
version_compatible(${major}.${minor} same)
math(EXPR next_major "${major} + 1")
version_compatible(${next_major}.0 other)
if(NOT same OR other)
  fail("axleConfigVersion.cmake: ${major}.${minor} compatible '${same}', ${next_major}.0 '${other}'")
endif()

# ---- (b) What a program inherits: no flag of axle's own build ------------------------------
file(READ ${targets_files} targets)
file(READ ${pc_files} pc)
if(targets MATCHES "INTERFACE_COMPILE_OPTIONS")
  fail("an installed target carries compile options (axle's own flags stay in its build)")
endif()
foreach(text targets pc)
  foreach(regex "-W[a-z][^ \";]*" "-march=[^ \";]*" "-O[0-9s]" "[Ee]igen[^ \";]*" "asio|ASIO[A-Z_]*")
    if("${${text}}" MATCHES "(^|[ \";])(${regex})")
      fail("the installed ${text} file holds '${CMAKE_MATCH_2}'")
    endif()
  endforeach()
  foreach(path "${AXLE_SOURCE}/" "${BUILD_DIR}/")
    string(FIND "${${text}}" "${path}" at)
    if(NOT at EQUAL -1)
      fail("the installed ${text} file names ${path}")
    endif()
  endforeach()
  if(NOT SANITIZE AND "${${text}}" MATCHES "-fsanitize")
    fail("the installed ${text} file asks for a sanitizer, but this build has none")
  endif()
endforeach()

# ---- (c) examples/consumer through find_package(axle) -------------------------------------
set(configure_args -S ${AXLE_SOURCE}/examples/consumer -B ${WORK_DIR}/consumer -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("configuring examples/consumer" ${CMAKE_COMMAND} ${configure_args})
# The package found must be the one just installed, not another axle on the machine.
file(STRINGS ${WORK_DIR}/consumer/CMakeCache.txt axle_dir REGEX "^axle_DIR:")
get_filename_component(installed_dir ${config_files} DIRECTORY)
if(NOT axle_dir STREQUAL "axle_DIR:PATH=${installed_dir}")
  fail("examples/consumer found another axle: ${axle_dir}, not ${installed_dir}")
endif()
run("building examples/consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
execute_process(COMMAND ${WORK_DIR}/consumer/consumer
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "examples/consumer:\n${out}")
if(NOT result EQUAL 0 OR NOT out MATCHES "consumer: loss [0-9.]+ -> [0-9.]+, learned")
  fail("examples/consumer did not learn (exit ${result}):\n${out}")
endif()

# ---- (d) A one-file program through pkg-config ----------------------------------------------
if(PKG_CONFIG AND CXX_COMPILER)
  get_filename_component(pc_dir ${pc_files} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run("pkg-config --cflags --libs axle" ${PKG_CONFIG} --cflags --libs axle)
  string(STRIP "${output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(compile ${CXX_COMPILER} -std=c++20 ${AXLE_SOURCE}/tests/install/pkg_config_main.cpp
    -o ${WORK_DIR}/pkg_config_main ${flags})
  if(LAUNCHER)
    list(PREPEND compile ${LAUNCHER})
  endif()
  run("compiling with pkg-config's flags" ${compile})
  execute_process(COMMAND ${WORK_DIR}/pkg_config_main
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "${out}")
  if(NOT result EQUAL 0)
    fail("the program built with pkg-config's flags failed (exit ${result}):\n${out}")
  endif()
else()
  message(STATUS "pkg-config or the compiler's path is unknown: the pkg-config check is skipped")
endif()

if(failures)
  message(FATAL_ERROR "the installed axle is not what a program needs:${failures}")
endif()
message(STATUS "installed ${header_count} headers into ${prefix}; "
               "examples/consumer and the pkg-config program built and ran")
