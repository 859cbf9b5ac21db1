# Tests cmake/AxleLayers.cmake: a project of two parts, `low` below `high`, configures while
# `high` links `low`, and fails naming the link once `low` links `high` too. Nothing is built.
#
#   cmake -DAXLE_SOURCE=<axle's source dir> -DWORK_DIR=<scratch dir> -DGENERATOR=<generator>
#         -P layers_test.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var AXLE_SOURCE WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "layers_test.cmake: pass -D${var}=...")
  endif()
endforeach()

set(project ${WORK_DIR}/project)
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${project}/layers.txt "# lowest first\nlow   # the bottom\nhigh\n")
file(WRITE ${project}/low/low.cpp "int low() { return 1; }\n")
file(WRITE ${project}/high/high.cpp "int high() { return 2; }\n")
file(WRITE ${project}/high/CMakeLists.txt
  "add_library(high_lib STATIC high.cpp)\ntarget_link_libraries(high_lib PUBLIC low::lib)\n")

function(configure_with low_links out_result out_output)
  file(WRITE ${project}/low/CMakeLists.txt "add_library(low_lib STATIC low.cpp)
add_library(low::lib ALIAS low_lib)
${low_links}
")
  file(WRITE ${project}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(layers_probe LANGUAGES CXX)
add_subdirectory(low)
add_subdirectory(high)
include(${AXLE_SOURCE}/cmake/AxleLayers.cmake)
axle_check_layers(\${PROJECT_SOURCE_DIR}/layers.txt)
")
  file(REMOVE_RECURSE ${WORK_DIR}/build)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${project} -B ${WORK_DIR}/build -G ${GENERATOR}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  set(${out_result} ${result} PARENT_SCOPE)
  set(${out_output} "${output}" PARENT_SCOPE)
endfunction()

configure_with("" result output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "links that go down failed the check:\n${output}")
endif()

# A generator expression around the planted link hides nothing.
configure_with("target_link_libraries(low_lib PRIVATE $<BUILD_INTERFACE:high_lib>)"
  result output)
if(result EQUAL 0)
  message(FATAL_ERROR "a link from low up to high configured without an error:\n${output}")
endif()
string(FIND "${output}" "low_lib (low) links high_lib (high)" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the failure does not name the link that runs up:\n${output}")
endif()
message(STATUS "layers_test: a link up fails the configuration and is named")
