# oneDNN for host bf16 GEMMs (src/kernels/base/onednn_gemm.*): the core's bf16
# arithmetic (AMX, AVX512-BF16) where OpenBLAS as Debian builds it has none.
# Host builds only: a GPU build's bf16 GEMMs run on the device. Without
# oneDNN (not found, broken, or -DMINIATTN_ENABLE_ONEDNN=OFF) host bf16 GEMMs
# widen their operands to fp32 for the fp32 BLAS. Defines MINIATTN_HAVE_ONEDNN.
option(MINIATTN_ENABLE_ONEDNN "host bf16 GEMMs through oneDNN where it is found" ON)
set(MINIATTN_HAVE_ONEDNN OFF)
set(_miniattn_device_build OFF)
foreach(_device CUDA HIP SYCL)
  if(Kokkos_ENABLE_${_device} OR "${_device}" IN_LIST Kokkos_DEVICES)
    set(_miniattn_device_build ON)
  endif()
endforeach()

# An optional package must never end the configure, but a package's own
# config file can: Debian's dnnl-config.cmake calls find_package(OpenCL
# REQUIRED) (its library is built with the OpenCL GPU runtime), which is fatal
# where OpenCL's development files are missing, and CMake cannot catch it. So
# a child configure of a two-line project finds the package first, with this
# configure's compilers and search paths; only where it succeeds is the package
# found here. Sets <out_var> to TRUE or FALSE and <out_var>_REASON to the
# child's first error, if the package was there and failed.
function(miniattn_probe_config_package package out_var)
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/miniattn-probe-${package})
  file(REMOVE_RECURSE ${dir})
  file(WRITE ${dir}/CMakeLists.txt
    "cmake_minimum_required(VERSION 3.16)\nproject(probe LANGUAGES C CXX)\n"
    "find_package(${package} CONFIG REQUIRED)\n")
  set(args -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
  foreach(var CMAKE_PREFIX_PATH ${package}_DIR ${package}_ROOT CMAKE_FIND_ROOT_PATH CMAKE_MODULE_PATH)
    if(DEFINED ${var})
      list(APPEND args "-D${var}=${${var}}")
    endif()
  endforeach()
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${dir} -B ${dir}/build ${args}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  # A package that is absent is no failure to report; one that fails is, in
  # the first sentence of its first error (without "CMake Error at FILE:LINE").
  set(reason "")
  string(FIND "${err}" "CMake Error" at)
  if(NOT rc EQUAL 0 AND at GREATER -1 AND NOT err MATCHES "provided by \"${package}\"")
    string(SUBSTRING "${err}" ${at} -1 reason)
    string(REGEX REPLACE "Call Stack.*" "" reason "${reason}")
    string(REGEX REPLACE "^CMake Error at [^ ]+ \\([a-z_]+\\): *" "" reason "${reason}")
    string(REGEX REPLACE "[ \n]+" " " reason "${reason}")
    string(REGEX REPLACE "\\. .*" "." reason "${reason}")
    string(STRIP "${reason}" reason)
  endif()
  file(REMOVE_RECURSE ${dir})
  if(rc EQUAL 0)
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
  set(${out_var}_REASON "${reason}" PARENT_SCOPE)
endfunction()

if(MINIATTN_ENABLE_ONEDNN AND NOT _miniattn_device_build)
  set(_miniattn_dnnl_usable FALSE)
  if(NOT CMAKE_DISABLE_FIND_PACKAGE_dnnl)
    miniattn_probe_config_package(dnnl _miniattn_dnnl_usable)
  endif()
  if(_miniattn_dnnl_usable)
    find_package(dnnl CONFIG QUIET)
  endif()
  # omp_set_num_threads: oneDNN's OpenMP runtime is held to one thread a call.
  find_package(OpenMP QUIET COMPONENTS CXX)
  if(dnnl_FOUND AND OpenMP_CXX_FOUND)
    set(MINIATTN_HAVE_ONEDNN ON)
    message(STATUS "miniattn: host bf16 GEMMs through oneDNN ${dnnl_VERSION}")
  else()
    set(_why "no oneDNN (dnnl) package found")
    if(_miniattn_dnnl_usable_REASON)
      set(_why "oneDNN's CMake package fails (${_miniattn_dnnl_usable_REASON})")
    elseif(dnnl_FOUND)
      set(_why "no OpenMP for oneDNN")
    endif()
    message(STATUS "miniattn: ${_why}: host bf16 GEMMs widen to fp32 "
                   "(Debian: scripts/install_deps.sh installs libdnnl-dev and ocl-icd-opencl-dev)")
  endif()
endif()
