# The API reference (`./axle.sh docs`): the target `docs` runs Doxygen over the user API of
# cmake/public_headers.txt into build/docs/html/. The headers axle's API includes only for their
# inline code are not documented as an API. tests/docs runs the same configuration with warnings
# as errors, so an undocumented public name fails the suite.
find_program(AXLE_DOXYGEN doxygen)

# The user API: the list's names up to its second group.
file(STRINGS ${PROJECT_SOURCE_DIR}/cmake/public_headers.txt axle_public_lines)
set(axle_docs_headers "")
set(axle_in_user_api OFF)
foreach(line IN LISTS axle_public_lines)
  if(line MATCHES "^# The user API")
    set(axle_in_user_api ON)
  elseif(line MATCHES "^# Headers the ones above include")
    set(axle_in_user_api OFF)
  elseif(axle_in_user_api AND NOT line MATCHES "^#" AND NOT line STREQUAL "")
    list(APPEND axle_docs_headers ${PROJECT_SOURCE_DIR}/${line})
  endif()
endforeach()
list(JOIN axle_docs_headers " " AXLE_DOCS_INPUT)

# Writes the Doxyfile for `output` (warnings fail the run when `warn_as_error` is
# FAIL_ON_WARNINGS).
function(axle_doxyfile doxyfile output warn_as_error)
  set(AXLE_DOCS_OUTPUT ${output})
  set(AXLE_DOCS_WARN_AS_ERROR ${warn_as_error})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/Doxyfile.in ${doxyfile} @ONLY)
endfunction()

axle_doxyfile(${PROJECT_BINARY_DIR}/docs/Doxyfile ${PROJECT_BINARY_DIR}/docs NO)
if(AXLE_DOXYGEN)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/docs
    COMMAND ${AXLE_DOXYGEN} ${PROJECT_BINARY_DIR}/docs/Doxyfile
    COMMAND ${CMAKE_COMMAND} -E cat ${PROJECT_BINARY_DIR}/docs/warnings.txt
    COMMENT "Doxygen: the API reference in ${PROJECT_BINARY_DIR}/docs/html/index.html"
    VERBATIM)
else()
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E echo "doxygen is not installed: ./axle.sh deps installs it"
    COMMAND ${CMAKE_COMMAND} -E false
    VERBATIM)
endif()
