# cuDNN's fused attention (kernels.attention: cudnn) through cudnn-frontend
# 1.23.0: src/kernels/attention/cudnn/cudnn_graphs.cpp, the one translation unit
# that includes the frontend, compiled once into its own static library
# without Kokkos.
#
#   MINIATTN_ENABLE_CUDNN  (ON when everything below is found and Kokkos has the
#                          CUDA backend) link miniattn_cudnn into miniattn_lib and
#                          define MINIATTN_HAVE_CUDNN there, so that
#                          kernels.attention: cudnn runs cuDNN's fused attention.
#                          ON without the pieces: a configure error naming them.
#
# Neither libcudnn nor libcudart is linked: the frontend loads libcudnn.so.9 at
# run time (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), so the library builds on
# any machine with the headers, and its graph test (tests/kernels,
# test_cudnn_graphs) validates graphs on a machine without a GPU. At run time
# libcudnn.so.9 must be on the loader's path, and for the frontend's few CUDA
# runtime calls (the device's sm version, workspace copies) exactly one of
# libcudart.so.12 and libcudart.so.13 (the frontend refuses to pick between two).
#
# Where to look:
#   cudnn-frontend  CUDNN_FRONTEND_ROOT (CMake or environment variable), then
#                   ${PROJECT_SOURCE_DIR}/build-deps/cudnn-frontend-1.23.0, where
#                   scripts/unpack_cudnn_frontend.sh puts it; >= 1.23.0.
#   cudnn.h         CUDNN_ROOT, CUDAToolkit_ROOT (CMake or environment
#                   variables), /usr/local/cuda, a pip wheel's nvidia/cudnn
#                   (as CUDNN_ROOT=.../site-packages or .../nvidia/cudnn, or
#                   the python3 on PATH's nvidia.cudnn package).
#   cuda.h, cuda_runtime_api.h  the CUDA toolkit (FindCUDAToolkit).
#
# Defines:
#   miniattn_cudnn                 STATIC library (when found)
#   MINIATTN_CUDNN_FOUND           all the pieces were found
#   MINIATTN_CUDNN_VERSION         cuDNN's version from cudnn_version.h, e.g. 9.19.0
#   MINIATTN_CUDNN_LIBRARY_DIR     the directory of the libcudnn found at configure
#                                  time ("" when none): the tests' LD_LIBRARY_PATH

set(MINIATTN_CUDNN_FOUND FALSE)
set(MINIATTN_CUDNN_VERSION "")
set(MINIATTN_CUDNN_LIBRARY_DIR "")
set(_miniattn_cudnn_missing "")

# cudnn-frontend: our own unpacked copy unless told otherwise; a system copy
# of another version is not picked up by accident.
set(_miniattn_cudnn_fe_hints "")
foreach(_root IN ITEMS "${CUDNN_FRONTEND_ROOT}" "$ENV{CUDNN_FRONTEND_ROOT}"
                       "${PROJECT_SOURCE_DIR}/build-deps/cudnn-frontend-1.23.0")
  if(_root)
    list(APPEND _miniattn_cudnn_fe_hints "${_root}")
  endif()
endforeach()
find_path(MINIATTN_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
  HINTS ${_miniattn_cudnn_fe_hints}
  PATH_SUFFIXES include
  NO_DEFAULT_PATH
  DOC "Directory holding cudnn_frontend.h (cudnn-frontend >= 1.23.0)")
set(_miniattn_cudnn_fe_version "")
if(MINIATTN_CUDNN_FRONTEND_INCLUDE_DIR)
  file(STRINGS "${MINIATTN_CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h" _miniattn_cudnn_fe_lines
       REGEX "^#define[ \t]+CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "CUDNN_FRONTEND_${_part}_VERSION[ \t]+([0-9]+)" _m "${_miniattn_cudnn_fe_lines}")
    list(APPEND _miniattn_cudnn_fe_version "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN _miniattn_cudnn_fe_version "." _miniattn_cudnn_fe_version)
  if(_miniattn_cudnn_fe_version VERSION_LESS 1.23.0)
    list(APPEND _miniattn_cudnn_missing
         "cudnn-frontend >= 1.23.0 (found ${_miniattn_cudnn_fe_version} in ${MINIATTN_CUDNN_FRONTEND_INCLUDE_DIR})")
  endif()
else()
  list(APPEND _miniattn_cudnn_missing
       "cudnn-frontend 1.23.0 (run scripts/unpack_cudnn_frontend.sh, or pass -DCUDNN_FRONTEND_ROOT=<its folder>)")
endif()

# The CUDA toolkit: cuda.h and cuda_runtime_api.h, which the frontend includes.
if(CMAKE_VERSION VERSION_LESS 3.17)
  list(APPEND _miniattn_cudnn_missing "the CUDA toolkit (FindCUDAToolkit needs CMake >= 3.17)")
else()
  if(NOT CUDAToolkit_FOUND)
    find_package(CUDAToolkit QUIET)
  endif()
  find_path(MINIATTN_CUDNN_CUDA_INCLUDE_DIR cuda_runtime_api.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH
    DOC "Directory holding cuda.h and cuda_runtime_api.h")
  if(NOT CUDAToolkit_FOUND OR NOT MINIATTN_CUDNN_CUDA_INCLUDE_DIR
     OR NOT EXISTS "${MINIATTN_CUDNN_CUDA_INCLUDE_DIR}/cuda.h")
    list(APPEND _miniattn_cudnn_missing "the CUDA toolkit's cuda.h and cuda_runtime_api.h (set CUDAToolkit_ROOT)")
  endif()
endif()

# cuDNN's headers; the library only to tell the tests where dlopen finds it.
set(_miniattn_cudnn_hints "")
foreach(_root IN ITEMS "${CUDNN_ROOT}" "$ENV{CUDNN_ROOT}" "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}"
                       /usr/local/cuda)
  if(_root)
    list(APPEND _miniattn_cudnn_hints "${_root}")
  endif()
endforeach()
macro(_miniattn_find_cudnn)
  find_path(MINIATTN_CUDNN_INCLUDE_DIR cudnn.h
    HINTS ${_miniattn_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include nvidia/cudnn/include
    DOC "Directory holding cudnn.h and cudnn_version.h (cuDNN 9)")
  # NAMES_PER_DIR: a hint's libcudnn.so.9 before a system libcudnn.so (an H200
  # image had 9.19 in PyTorch's wheel, given as CUDNN_ROOT, and 9.14.0 in /usr/lib).
  find_library(MINIATTN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
    HINTS ${_miniattn_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu nvidia/cudnn/lib
    DOC "libcudnn (not linked: loaded at run time; its directory goes on the tests' LD_LIBRARY_PATH)")
endmacro()
_miniattn_find_cudnn()
# PyTorch's GPU images ship cuDNN as a pip wheel (nvidia-cudnn-cu13): its
# python is asked only while the headers or the library are still unfound.
if(NOT MINIATTN_CUDNN_INCLUDE_DIR OR NOT MINIATTN_CUDNN_LIBRARY)
  find_program(MINIATTN_CUDNN_PYTHON NAMES python3 DOC "A python3 whose nvidia.cudnn wheel may hold cuDNN")
  mark_as_advanced(MINIATTN_CUDNN_PYTHON)
  if(MINIATTN_CUDNN_PYTHON)
    execute_process(COMMAND "${MINIATTN_CUDNN_PYTHON}" -c "import nvidia.cudnn as m; print(list(m.__path__)[0])"
                    OUTPUT_VARIABLE _miniattn_cudnn_wheel OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND IS_DIRECTORY "${_miniattn_cudnn_wheel}")
      list(APPEND _miniattn_cudnn_hints "${_miniattn_cudnn_wheel}")
      _miniattn_find_cudnn()
    endif()
  endif()
endif()
if(MINIATTN_CUDNN_INCLUDE_DIR AND EXISTS "${MINIATTN_CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${MINIATTN_CUDNN_INCLUDE_DIR}/cudnn_version.h" _miniattn_cudnn_lines
       REGEX "^#define[ \t]+CUDNN_(MAJOR|MINOR|PATCHLEVEL)[ \t]+[0-9]+")
  set(_miniattn_cudnn_parts "")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_part}[ \t]+([0-9]+)" _m "${_miniattn_cudnn_lines}")
    list(APPEND _miniattn_cudnn_parts "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN _miniattn_cudnn_parts "." MINIATTN_CUDNN_VERSION)
  if(MINIATTN_CUDNN_VERSION VERSION_LESS 9.0.0)
    list(APPEND _miniattn_cudnn_missing
         "cuDNN 9 headers (found ${MINIATTN_CUDNN_VERSION} in ${MINIATTN_CUDNN_INCLUDE_DIR})")
  endif()
else()
  list(APPEND _miniattn_cudnn_missing "cudnn.h and cudnn_version.h of cuDNN 9 (set CUDNN_ROOT)")
endif()
if(MINIATTN_CUDNN_LIBRARY)
  get_filename_component(MINIATTN_CUDNN_LIBRARY_DIR "${MINIATTN_CUDNN_LIBRARY}" DIRECTORY)
endif()

if(NOT _miniattn_cudnn_missing)
  set(MINIATTN_CUDNN_FOUND TRUE)
endif()

set(_miniattn_cudnn_default OFF)
if(MINIATTN_CUDNN_FOUND AND (Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES))
  set(_miniattn_cudnn_default ON)
endif()
option(MINIATTN_ENABLE_CUDNN
       "Run kernels.attention: cudnn with cuDNN's fused attention (needs cudnn-frontend, cuDNN 9 headers, CUDA)"
       ${_miniattn_cudnn_default})
# The graph library and its test without a cuDNN run path: one host build
# validating the graphs is enough (the threaded and sanitizer builds turn it
# off and save the frontend's minute-long compile). Off by default where Kokkos
# has a HIP or SYCL backend: their compilers (hipcc) would build the CUDA
# headers as HIP/SYCL.
set(_miniattn_cudnn_graph_default ON)
foreach(_backend HIP SYCL)
  if(Kokkos_ENABLE_${_backend} OR "${_backend}" IN_LIST Kokkos_DEVICES)
    set(_miniattn_cudnn_graph_default OFF)
  endif()
endforeach()
option(MINIATTN_CUDNN_GRAPH_CHECK "Build miniattn_cudnn and test_cudnn_graphs where cuDNN's headers are found"
       ${_miniattn_cudnn_graph_default})

if(MINIATTN_CUDNN_FOUND AND (MINIATTN_ENABLE_CUDNN OR MINIATTN_CUDNN_GRAPH_CHECK))
  add_library(miniattn_cudnn STATIC ${PROJECT_SOURCE_DIR}/src/kernels/attention/cudnn/cudnn_graphs.cpp
                                    ${PROJECT_SOURCE_DIR}/src/kernels/attention/cudnn/sdpa_shape_checks.cpp)
  target_compile_features(miniattn_cudnn PUBLIC cxx_std_17)
  # JSON off: the frontend would otherwise need nlohmann's json.hpp of its own version.
  # Dynamic loading: every cuDNN and CUDA runtime call through dlsym, so nothing is linked.
  target_compile_definitions(miniattn_cudnn PRIVATE CUDNN_FRONTEND_SKIP_JSON_LIB NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
  target_include_directories(miniattn_cudnn SYSTEM PRIVATE
    ${MINIATTN_CUDNN_FRONTEND_INCLUDE_DIR} ${MINIATTN_CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(miniattn_cudnn PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(miniattn_cudnn PRIVATE ${CMAKE_DL_LIBS} miniattn_warnings)
endif()

list(JOIN _miniattn_cudnn_missing "; " _miniattn_cudnn_why)
if(MINIATTN_ENABLE_CUDNN)
  if(NOT MINIATTN_CUDNN_FOUND)
    message(FATAL_ERROR "MINIATTN_ENABLE_CUDNN: missing ${_miniattn_cudnn_why}")
  endif()
  if(NOT (Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES))
    message(WARNING "MINIATTN_ENABLE_CUDNN with a Kokkos that has no CUDA backend (devices: ${Kokkos_DEVICES}): "
                    "cuDNN needs device memory, so this build has no cuDNN runner (cudnn_runner.cpp) and "
                    "kernels.attention: cudnn fails at run time.")
  endif()
  message(STATUS "miniattn: cuDNN attention ON (cuDNN ${MINIATTN_CUDNN_VERSION} headers, cudnn-frontend "
                 "${_miniattn_cudnn_fe_version}; libcudnn.so.9 loaded at run time)")
elseif(MINIATTN_CUDNN_FOUND AND NOT MINIATTN_CUDNN_GRAPH_CHECK)
  message(STATUS "miniattn: cuDNN attention OFF, and its graph check (MINIATTN_CUDNN_GRAPH_CHECK OFF)")
elseif(MINIATTN_CUDNN_FOUND)
  message(STATUS "miniattn: cuDNN attention OFF (MINIATTN_ENABLE_CUDNN; ON by default only with a Kokkos CUDA "
                 "backend); miniattn_cudnn and its graph test built "
                 "(cuDNN ${MINIATTN_CUDNN_VERSION} headers, cudnn-frontend ${_miniattn_cudnn_fe_version}, "
                 "libcudnn in ${MINIATTN_CUDNN_LIBRARY_DIR})")
else()
  message(STATUS "miniattn: cuDNN attention not built (missing ${_miniattn_cudnn_why})")
endif()
