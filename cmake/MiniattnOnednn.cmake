# oneDNN for host bf16 GEMMs (src/kernels/base/onednn_gemm.*): the core's bf16
# arithmetic (AMX, AVX512-BF16) where OpenBLAS as Debian builds it has none.
# Host builds only: a GPU build's bf16 GEMMs run on the device. Without
# oneDNN (not found, or -DMINIATTN_ENABLE_ONEDNN=OFF) host bf16 GEMMs widen
# their operands to fp32 for the fp32 BLAS. Defines MINIATTN_HAVE_ONEDNN.
option(MINIATTN_ENABLE_ONEDNN "host bf16 GEMMs through oneDNN where it is found" ON)
set(MINIATTN_HAVE_ONEDNN OFF)
set(_miniattn_device_build OFF)
foreach(_device CUDA HIP SYCL)
  if(Kokkos_ENABLE_${_device} OR "${_device}" IN_LIST Kokkos_DEVICES)
    set(_miniattn_device_build ON)
  endif()
endforeach()
if(MINIATTN_ENABLE_ONEDNN AND NOT _miniattn_device_build)
  find_package(dnnl CONFIG QUIET)
  # omp_set_num_threads: oneDNN's OpenMP runtime is held to one thread a call.
  find_package(OpenMP QUIET COMPONENTS CXX)
  if(dnnl_FOUND AND OpenMP_CXX_FOUND)
    set(MINIATTN_HAVE_ONEDNN ON)
    message(STATUS "miniattn: host bf16 GEMMs through oneDNN ${dnnl_VERSION}")
  else()
    message(STATUS "miniattn: no oneDNN (dnnl) with OpenMP found: host bf16 GEMMs widen to fp32 "
                   "(Debian: apt-get install libdnnl-dev)")
  endif()
endif()
