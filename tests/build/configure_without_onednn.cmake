# An optional dependency that is missing or broken never stops the configure:
# the project configures with oneDNN's CMake package made unfindable, and with
# one that fails as Debian's does without OpenCL's files (a dnnl-config.cmake
# that ends in a fatal error), and says that host bf16 GEMMs widen to fp32.
#   cmake -DSOURCE_DIR=<project> -DWORK_DIR=<scratch> -DCONFIGURE_ARGS=<arguments joined by |> -P configure_without_onednn.cmake
foreach(var SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "configure_without_onednn: give -D${var}=...")
  endif()
endforeach()

string(REPLACE "|" ";" CONFIGURE_ARGS "${CONFIGURE_ARGS}")
set(broken_package ${WORK_DIR}/broken-dnnl)
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${broken_package}/dnnl-config.cmake
  "find_package(OpenCL_that_is_not_installed REQUIRED)\n")

# check_configure(<name> <expected words of the oneDNN line> <extra cmake arguments...>)
function(check_configure name expected)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/${name}
                          -DMINIATTN_ENABLE_TESTS=OFF ${CONFIGURE_ARGS} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCH "miniattn: [^\n]*host bf16 GEMMs[^\n]*" said "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configure_without_onednn: ${name}: the configure failed (rc ${rc}):\n${err}")
  endif()
  if(NOT said MATCHES "${expected}" OR NOT said MATCHES "widen to fp32")
    message(FATAL_ERROR "configure_without_onednn: ${name}: expected a line with '${expected}' and "
                        "'widen to fp32', got '${said}'")
  endif()
  message(STATUS "configure_without_onednn: ${name}: configured; ${said}")
endfunction()

check_configure(unfindable "no oneDNN" -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON)
check_configure(broken "oneDNN's CMake package fails .*OpenCL_that_is_not_installed"
                -Ddnnl_DIR=${broken_package})
file(REMOVE_RECURSE ${WORK_DIR})
