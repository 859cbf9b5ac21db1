# Runs Doxygen as `./axle.sh docs` does, warnings as errors, over a planted header (which must
# fail: one function has no comment) and then over the public headers (which must not).
#
#   cmake -DDOXYGEN=<doxygen> -DDOXYFILE_IN=<cmake/Doxyfile.in> -DINPUT=<headers>
#         -DPROJECT_SOURCE_DIR=<source> -DPROJECT_VERSION=<version> -DWORK=<scratch dir>
#         -P docs_test.cmake
cmake_minimum_required(VERSION 3.25)

# Runs Doxygen over `input` into `output`; sets `status` and `warnings`.
function(run_doxygen input output)
  set(AXLE_DOCS_INPUT "${input}")
  set(AXLE_DOCS_OUTPUT ${output})
  set(AXLE_DOCS_WARN_AS_ERROR FAIL_ON_WARNINGS)
  file(REMOVE_RECURSE ${output})
  file(MAKE_DIRECTORY ${output})
  configure_file(${DOXYFILE_IN} ${output}/Doxyfile @ONLY)
  execute_process(COMMAND ${DOXYGEN} ${output}/Doxyfile RESULT_VARIABLE result
                  OUTPUT_QUIET ERROR_VARIABLE errors)
  set(text "")
  if(EXISTS ${output}/warnings.txt)
    file(READ ${output}/warnings.txt text)
  endif()
  set(status ${result} PARENT_SCOPE)
  set(warnings "${text}${errors}" PARENT_SCOPE)
endfunction()

file(WRITE ${WORK}/planted/planted.h "#pragma once
/// A namespace for the planted header.
namespace planted {
/// Documented.
int documented();
int undocumented();
}  // namespace planted
")
run_doxygen(${WORK}/planted/planted.h ${WORK}/planted/out)
if(status EQUAL 0 OR NOT warnings MATCHES "undocumented")
  message(FATAL_ERROR "Doxygen passed a header with an undocumented function (status ${status}):\n"
                      "${warnings}")
endif()

separate_arguments(headers UNIX_COMMAND "${INPUT}")
list(LENGTH headers count)
if(count LESS 40)
  message(FATAL_ERROR "expected the public headers, got ${count}: ${INPUT}")
endif()
run_doxygen("${INPUT}" ${WORK}/api)
string(STRIP "${warnings}" warnings)
if(NOT status EQUAL 0 OR warnings)
  message(FATAL_ERROR "the public headers' documentation has warnings (status ${status}):\n"
                      "${warnings}")
endif()
message(STATUS "${count} public headers documented without a warning")
