# The NCCL backend of Comm (src/comm/nccl_comm.cpp, parallel.comm: nccl).
#
#   MINIATTN_ENABLE_NCCL         (OFF) build the backend into miniattn_lib and
#                                define MINIATTN_HAVE_NCCL; needs the CUDA
#                                runtime, NCCL and a Kokkos CUDA build.
#   MINIATTN_NCCL_COMPILE_CHECK  (ON when NCCL and the CUDA toolkit are found,
#                                the backend is off and Kokkos has no HIP or
#                                SYCL backend, whose compilers would build the
#                                CUDA headers as HIP/SYCL) compile nccl_comm.cpp into a
#                                separate library, miniattn_nccl_check, and link
#                                it into miniattn_nccl_link_check, so that a
#                                build without GPUs (CI) still compiles and links
#                                the backend. miniattn_lib stays CUDA-free.
#
# Where to look: NCCL_ROOT, CUDAToolkit_ROOT (both as CMake or environment
# variables), then /usr/local/cuda (where NCCL ships with the CUDA toolkit).
#
# Defines for src/comm and tests/comm:
#   miniattn_nccl                 INTERFACE target: nccl.h + cuda_runtime.h
#                                 include directories, libnccl, CUDA::cudart
#   MINIATTN_NCCL_FOUND           NCCL and the CUDA runtime were both found
#   MINIATTN_NCCL_VERSION_CODE    NCCL_VERSION_CODE of the nccl.h found
#   MINIATTN_NCCL_BUILD_CHECK     the compile/link check is to be built

option(MINIATTN_ENABLE_NCCL "Build the NCCL backend of Comm (needs CUDA, NCCL and a Kokkos CUDA build)" OFF)

set(MINIATTN_NCCL_FOUND FALSE)
set(MINIATTN_NCCL_VERSION_CODE "")
set(_miniattn_nccl_why "")

set(_miniattn_nccl_hints "")
foreach(_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" /usr/local/cuda)
  if(_root)
    list(APPEND _miniattn_nccl_hints "${_root}")
  endif()
endforeach()

if(CMAKE_VERSION VERSION_LESS 3.17)
  set(_miniattn_nccl_why "FindCUDAToolkit needs CMake >= 3.17")
else()
  # FindCUDAToolkit looks at CUDAToolkit_ROOT, nvcc on PATH, then /usr/local/cuda.
  if(MINIATTN_ENABLE_NCCL)
    find_package(CUDAToolkit)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart)
    set(_miniattn_nccl_why "no CUDA toolkit (CUDA::cudart); set CUDAToolkit_ROOT")
  else()
    find_path(MINIATTN_NCCL_INCLUDE_DIR nccl.h
      HINTS ${_miniattn_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
      PATH_SUFFIXES include
      DOC "Directory holding nccl.h")
    find_library(MINIATTN_NCCL_LIBRARY NAMES nccl
      HINTS ${_miniattn_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
      PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu
      DOC "The NCCL library")
    if(NOT MINIATTN_NCCL_INCLUDE_DIR OR NOT MINIATTN_NCCL_LIBRARY)
      set(_miniattn_nccl_why "no nccl.h / libnccl; set NCCL_ROOT")
    else()
      file(STRINGS "${MINIATTN_NCCL_INCLUDE_DIR}/nccl.h" _miniattn_nccl_code_line
           REGEX "^#define[ \t]+NCCL_VERSION_CODE[ \t]+[0-9]+")
      if(_miniattn_nccl_code_line MATCHES "NCCL_VERSION_CODE[ \t]+([0-9]+)")
        set(MINIATTN_NCCL_VERSION_CODE "${CMAKE_MATCH_1}")
      endif()
      set(MINIATTN_NCCL_FOUND TRUE)
    endif()
  endif()
endif()

if(MINIATTN_NCCL_FOUND)
  add_library(miniattn_nccl INTERFACE)
  target_include_directories(miniattn_nccl SYSTEM INTERFACE ${MINIATTN_NCCL_INCLUDE_DIR})
  target_link_libraries(miniattn_nccl INTERFACE ${MINIATTN_NCCL_LIBRARY} CUDA::cudart)
endif()

if(MINIATTN_ENABLE_NCCL)
  if(NOT MINIATTN_NCCL_FOUND)
    message(FATAL_ERROR "MINIATTN_ENABLE_NCCL: ${_miniattn_nccl_why}")
  endif()
  if(NOT (Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES))
    message(WARNING "MINIATTN_ENABLE_NCCL with a Kokkos that has no CUDA backend (devices: ${Kokkos_DEVICES}): "
                    "Views live in host memory, which NCCL cannot use; parallel.comm: nccl will fail at run time.")
  endif()
  message(STATUS "miniattn: NCCL backend ON (NCCL code ${MINIATTN_NCCL_VERSION_CODE}, ${MINIATTN_NCCL_LIBRARY})")
endif()

set(_miniattn_nccl_check_default OFF)
set(_miniattn_nccl_other_gpu FALSE)
foreach(_backend HIP SYCL)
  if(Kokkos_ENABLE_${_backend} OR "${_backend}" IN_LIST Kokkos_DEVICES)
    set(_miniattn_nccl_other_gpu TRUE)
  endif()
endforeach()
if(MINIATTN_NCCL_FOUND AND NOT MINIATTN_ENABLE_NCCL)
  if(_miniattn_nccl_other_gpu)
    set(_miniattn_nccl_why "Kokkos has a non-CUDA GPU backend (devices: ${Kokkos_DEVICES})")
  else()
    set(_miniattn_nccl_check_default ON)
  endif()
endif()
option(MINIATTN_NCCL_COMPILE_CHECK
       "Compile and link the NCCL backend into a check program even though it is not enabled"
       ${_miniattn_nccl_check_default})

set(MINIATTN_NCCL_BUILD_CHECK FALSE)
if(MINIATTN_NCCL_COMPILE_CHECK AND NOT MINIATTN_ENABLE_NCCL)
  if(MINIATTN_NCCL_FOUND)
    set(MINIATTN_NCCL_BUILD_CHECK TRUE)
    message(STATUS "miniattn: NCCL backend compile/link check ON (NCCL code ${MINIATTN_NCCL_VERSION_CODE}, "
                   "${MINIATTN_NCCL_LIBRARY})")
  else()
    message(STATUS "miniattn: NCCL backend compile/link check skipped: ${_miniattn_nccl_why}")
  endif()
elseif(NOT MINIATTN_ENABLE_NCCL AND (NOT MINIATTN_NCCL_FOUND OR _miniattn_nccl_other_gpu))
  message(STATUS "miniattn: NCCL backend not built (${_miniattn_nccl_why})")
endif()
