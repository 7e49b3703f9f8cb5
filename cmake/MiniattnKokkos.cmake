# Finds Kokkos and Kokkos Kernels and exposes them as two targets with stable
# names, whatever the installation:
#   miniattn::kokkos         Kokkos core (+ containers)
#   miniattn::kokkoskernels  Kokkos Kernels (dense BLAS through the vendor TPL)
#
# Two packagings are handled:
#  * a plain Kokkos/Kokkos Kernels 4.x install (Kokkos_ROOT / KokkosKernels_ROOT),
#    which exports Kokkos::kokkos and Kokkos::kokkoskernels;
#  * Debian's Trilinos packaging of Kokkos 3.4 (libtrilinos-kokkos-dev), whose
#    Kokkos::kokkos carries a non-existent include directory (/usr/lib/include;
#    the headers live in /usr/include/trilinos) and whose kernels target is
#    called trilinos_kokkoskernels.

# Debian's Kokkos refuses GNU extensions and warns unless they are off before it is found.
if(NOT DEFINED CMAKE_CXX_EXTENSIONS)
  set(CMAKE_CXX_EXTENSIONS OFF)
endif()

find_package(Kokkos REQUIRED)
find_package(KokkosKernels REQUIRED)

# Keep only include directories that exist, then add the directory that holds
# Kokkos_Core.hpp if it is still missing.
function(_miniattn_clean_includes out_var)
  set(kept "")
  foreach(dir IN LISTS ARGN)
    if(dir MATCHES "^\\$<" OR EXISTS "${dir}")
      list(APPEND kept "${dir}")
    endif()
  endforeach()
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

# Only the Trilinos packaging needs its header directory added by hand. A plain
# 4.x install's targets are right as they are, and searching anyway would find
# Debian's 3.4 headers first on a machine that has both (mixed headers, link errors).
set(MINIATTN_KOKKOS_INCLUDE_DIR "")
set(MINIATTN_KOKKOSKERNELS_INCLUDE_DIR "")
if(TARGET trilinos_kokkoscore OR TARGET trilinos_kokkoskernels)
  find_path(MINIATTN_TRILINOS_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp
    HINTS ${Kokkos_INCLUDE_DIRS} ${KokkosKernels_INCLUDE_DIRS}
    PATH_SUFFIXES trilinos kokkos)
  find_path(MINIATTN_TRILINOS_KOKKOSKERNELS_INCLUDE_DIR KokkosBlas3_gemm.hpp
    HINTS ${KokkosKernels_INCLUDE_DIRS} ${Kokkos_INCLUDE_DIRS} ${MINIATTN_TRILINOS_KOKKOS_INCLUDE_DIR}
    PATH_SUFFIXES trilinos kokkos-kernels)
  set(MINIATTN_KOKKOS_INCLUDE_DIR "${MINIATTN_TRILINOS_KOKKOS_INCLUDE_DIR}")
  set(MINIATTN_KOKKOSKERNELS_INCLUDE_DIR "${MINIATTN_TRILINOS_KOKKOSKERNELS_INCLUDE_DIR}")
endif()

foreach(tgt Kokkos::kokkos Kokkos::kokkoscore trilinos_kokkoscore trilinos_kokkoskernels Kokkos::kokkoskernels)
  if(TARGET ${tgt})
    get_target_property(_aliased ${tgt} ALIASED_TARGET)
    if(_aliased)
      continue()
    endif()
    get_target_property(_incs ${tgt} INTERFACE_INCLUDE_DIRECTORIES)
    if(_incs)
      _miniattn_clean_includes(_clean ${_incs})
      set_target_properties(${tgt} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_clean}")
    endif()
  endif()
endforeach()

add_library(miniattn_kokkos INTERFACE)
add_library(miniattn::kokkos ALIAS miniattn_kokkos)
target_link_libraries(miniattn_kokkos INTERFACE Kokkos::kokkos)
if(MINIATTN_KOKKOS_INCLUDE_DIR)
  target_include_directories(miniattn_kokkos SYSTEM INTERFACE ${MINIATTN_KOKKOS_INCLUDE_DIR})
endif()

add_library(miniattn_kokkoskernels INTERFACE)
add_library(miniattn::kokkoskernels ALIAS miniattn_kokkoskernels)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(miniattn_kokkoskernels INTERFACE Kokkos::kokkoskernels)
elseif(TARGET trilinos_kokkoskernels)
  target_link_libraries(miniattn_kokkoskernels INTERFACE trilinos_kokkoskernels)
else()
  message(FATAL_ERROR "Kokkos Kernels was found but exports neither Kokkos::kokkoskernels "
                      "nor trilinos_kokkoskernels; set KokkosKernels_ROOT to a 4.x install.")
endif()
if(MINIATTN_KOKKOSKERNELS_INCLUDE_DIR)
  target_include_directories(miniattn_kokkoskernels SYSTEM INTERFACE ${MINIATTN_KOKKOSKERNELS_INCLUDE_DIR})
endif()
target_link_libraries(miniattn_kokkoskernels INTERFACE miniattn_kokkos)

# Whether the host backend runs threads (OpenMP or Threads): the threaded
# tests (label "threads") are registered only then.
set(MINIATTN_KOKKOS_THREADED OFF)
if("OPENMP" IN_LIST Kokkos_DEVICES OR "THREADS" IN_LIST Kokkos_DEVICES OR Kokkos_ENABLE_OPENMP OR Kokkos_ENABLE_THREADS)
  set(MINIATTN_KOKKOS_THREADED ON)
endif()

message(STATUS "miniattn: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}; "
               "Kokkos Kernels ${KokkosKernels_VERSION}")

# On CUDA, chunked attention calls cuBLAS's strided-batched GEMM directly
# (src/kernels/base/batched_gemm.cpp): KokkosBlas::gemm has no batched cuBLAS path.
if(Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(miniattn_kokkoskernels INTERFACE CUDA::cublas)
endif()
