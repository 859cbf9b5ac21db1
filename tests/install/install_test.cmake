# Installs axle's build into WORK_DIR/prefix with `cmake --install`, checks what was installed
# (the public headers of cmake/public_headers.txt under include/axle/ and no other, the CMake
# package, the pkg-config file, no flag of axle's own build in what a program inherits), compiles
# each public header alone against it, then builds and runs examples/consumer/ against it through
# find_package(axle) and tests/install/pkg_config_main.cpp through pkg-config. axle itself is not
# rebuilt: the install copies what BUILD_DIR holds.
#
# With -DSHARED_BUILD_DIR=<dir>, axle's library is first configured there with
# -DBUILD_SHARED_LIBS=ON (tests, benchmarks off) and built alone, and that build is the one
# installed and checked: libaxle.so with its SONAME, no archive.
#
#   cmake -DBUILD_DIR=<axle's build> -DAXLE_SOURCE=<axle's source> -DAXLE_VERSION=<its version>
#         -DWORK_DIR=<scratch dir> [-DSHARED_BUILD_DIR=<dir>] [-DREADELF=<path>]
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
set(shared OFF)
if(SHARED_BUILD_DIR)
  set(shared ON)
  set(shared_args -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
    -DAXLE_BUILD_TESTS=OFF -DAXLE_BUILD_BENCHMARKS=OFF "-DAXLE_SANITIZE=${SANITIZE}")
  foreach(setting MAKE_PROGRAM:CMAKE_MAKE_PROGRAM CXX_COMPILER:CMAKE_CXX_COMPILER
      LAUNCHER:CMAKE_CXX_COMPILER_LAUNCHER)
    string(REPLACE ":" ";" setting ${setting})
    list(GET setting 0 from)
    list(GET setting 1 to)
    if(${from})
      list(APPEND shared_args -D${to}=${${from}})
    endif()
  endforeach()
  run("configuring axle with -DBUILD_SHARED_LIBS=ON" ${CMAKE_COMMAND} -S ${AXLE_SOURCE}
    -B ${SHARED_BUILD_DIR} ${shared_args})
  run("building libaxle.so" ${CMAKE_COMMAND} --build ${SHARED_BUILD_DIR} --target axle_axle)
  set(BUILD_DIR ${SHARED_BUILD_DIR})
endif()
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# ---- (a) The installed tree -----------------------------------------------------------------
foreach(file include/axle/axle.h include/axle/graph/tensor.h include/axle/io/data_loader.h)
  if(NOT EXISTS ${prefix}/${file})
    fail("${file} is not installed")
  endif()
endforeach()
# The libraries: the parts' archives, or libaxle.so named by its SONAME and nothing static.
file(GLOB_RECURSE archives ${prefix}/*.a)
file(GLOB_RECURSE shared_objects ${prefix}/*.so*)
if(shared)
  file(GLOB_RECURSE library ${prefix}/*/libaxle.so.${AXLE_VERSION})
  if(NOT library OR archives)
    fail("a shared build installs libaxle.so.${AXLE_VERSION} and no archive: ${library} ${archives}")
  elseif(READELF)
    run("readelf -d libaxle.so" ${READELF} -d ${library})
    string(REPLACE "." ";" parts ${AXLE_VERSION})
    list(GET parts 0 major)
    list(GET parts 1 minor)
    if(NOT output MATCHES "SONAME\\)[^\n]*\\[libaxle\\.so\\.${major}\\.${minor}\\]")
      fail("libaxle.so's SONAME is not libaxle.so.${major}.${minor}:\n${output}")
    endif()
  endif()
elseif(shared_objects OR NOT archives)
  fail("a static build installs the parts' archives and no shared object: ${shared_objects}")
endif()
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
# The public headers, cmake/public_headers.txt's list, and nothing else: an internal header
# (the actors, the compiler, the kernels, the transport) is never installed.
file(STRINGS ${AXLE_SOURCE}/cmake/public_headers.txt public_headers REGEX "^[^#]")
list(TRANSFORM public_headers PREPEND axle/)
file(GLOB_RECURSE installed_headers RELATIVE ${prefix}/include ${prefix}/include/*)
set(not_public ${installed_headers})
list(REMOVE_ITEM not_public ${public_headers})
foreach(header IN LISTS not_public)
  fail("include/${header} is installed but is not a public header (cmake/public_headers.txt)")
endforeach()
set(not_installed ${public_headers})
list(REMOVE_ITEM not_installed ${installed_headers})
foreach(header IN LISTS not_installed)
  fail("the public header include/${header} is not installed")
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
# PREFIX/include alone: the folders engine/, graph/, io/ never sit at the top of a program's path.
if(targets MATCHES "INTERFACE_INCLUDE_DIRECTORIES \"[^\"]*include/axle" OR pc MATCHES "-I[^ ]*/axle")
  fail("the installed package puts include/axle itself on a program's include path")
endif()
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

# How each program below is configured: the generator and compiler of axle's build, the prefix.
set(common_args -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
if(MAKE_PROGRAM)
  list(APPEND common_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND common_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(LAUNCHER)
  list(APPEND common_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

# ---- (c) Each public header alone, as #include <axle/...> with axle::axle's include path ----
set(alone_dir ${WORK_DIR}/headers_alone)
set(alone_sources "")
foreach(header IN LISTS public_headers)
  string(MAKE_C_IDENTIFIER ${header} name)
  file(WRITE ${alone_dir}/${name}.cpp "#include <${header}>\n")
  list(APPEND alone_sources ${name}.cpp)
endforeach()
file(WRITE ${alone_dir}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(axle_headers_alone LANGUAGES CXX)
find_package(axle REQUIRED)
add_library(headers_alone OBJECT ${alone_sources})
target_link_libraries(headers_alone PRIVATE axle::axle)
")
run("configuring the public headers alone" ${CMAKE_COMMAND} -S ${alone_dir} -B ${alone_dir}/build
  ${common_args})
execute_process(COMMAND ${CMAKE_COMMAND} --build ${alone_dir}/build
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT result EQUAL 0)
  fail("a public header does not compile alone as #include <axle/...>:\n${out}")
endif()

# ---- (d) examples/consumer through find_package(axle) -------------------------------------
set(configure_args -S ${AXLE_SOURCE}/examples/consumer -B ${WORK_DIR}/consumer
  ${common_args})
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
# Against libaxle.so the program loads it by its SONAME.
if(shared AND READELF)
  run("readelf -d consumer" ${READELF} -d ${WORK_DIR}/consumer/consumer)
  if(NOT output MATCHES "NEEDED\\)[^\n]*\\[libaxle\\.so\\.${major}\\.${minor}\\]")
    fail("examples/consumer does not load libaxle.so.${major}.${minor}:\n${output}")
  endif()
endif()

# ---- (e) A one-file program through pkg-config ----------------------------------------------
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
  # pkg-config gives no run path: the loader finds an installed libaxle.so by LD_LIBRARY_PATH.
  get_filename_component(libdir ${pc_dir} DIRECTORY)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${libdir}"
    ${WORK_DIR}/pkg_config_main
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "${out}")
  if(NOT result EQUAL 0)
    fail("the program built with pkg-config's flags failed (exit ${result}):\n${out}")
  endif()
else()
  message(STATUS "pkg-config or the compiler's path is unknown: the pkg-config check is skipped")
endif()

set(kind static)
if(shared)
  set(kind shared)
endif()
if(failures)
  message(FATAL_ERROR "the installed axle is not what a program needs:${failures}")
endif()
message(STATUS "installed ${header_count} headers and the ${kind} library into ${prefix}; "
               "examples/consumer and the pkg-config program built and ran")
