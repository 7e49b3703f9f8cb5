# Code generation for the CPU the mini-app runs on. The hot loops
# (src/kernels/attention/fused/fused_forward.cpp, fused_backward.cpp) are written for SIMD registers and fused
# multiply-add, which the x86-64 baseline the compilers target by default
# (SSE2, no FMA) does not have: -march=native makes them about 2-4x faster.
#
#   MINIATTN_ARCH_FLAGS  compile options for every miniattn target (library,
#                        executable, tests, benchmarks); a space-separated
#                        string or a ;-list. Default "-march=native" (or
#                        "-mcpu=native" where only that is accepted) when
#                          - the C++ compiler is GNU or Clang,
#                          - Kokkos has no device backend (CUDA, HIP, SYCL,
#                            OpenMPTarget): there the kernels run on the device
#                            and the host compiler is driven through Kokkos,
#                          - Kokkos sets no architecture itself (Kokkos_ARCH
#                            empty; a Kokkos configured with e.g.
#                            Kokkos_ARCH_ZEN3=ON already hands -march=znver3
#                            to everything that links it),
#                        otherwise empty.
#                        -DMINIATTN_ARCH_FLAGS= builds for the compiler's
#                        default target (a binary that runs on any x86-64).
#                        When the build machine is not the machine that runs
#                        the code (a cluster's login node of another CPU
#                        generation), name the target CPU, e.g.
#                        -DMINIATTN_ARCH_FLAGS=-march=znver3, or configure
#                        Kokkos with its Kokkos_ARCH_<CPU> option.
#   MINIATTN_FP_FLAGS    floating-point code generation. Default
#                        "-ffp-contract=fast" with GNU and Clang: a * b + c
#                        may become one fused multiply-add (GCC's own default,
#                        except in the strict ISO mode that
#                        CMAKE_CXX_EXTENSIONS=OFF selects, which would leave the
#                        FMA units idle). It changes results only in the last
#                        bit (one rounding instead of two). Nothing of
#                        -ffast-math: no reassociation, IEEE infinities, NaNs
#                        and signed zeros stay, as the float64 reference checks
#                        and the attention kernels' -inf masking need.
#                        (-fno-math-errno is not needed: the kernels compute
#                        exp themselves, and glibc's vector exp is only used
#                        under -ffast-math.)
#
# Both apply to C and C++ sources of this directory and everything below it.

include(CheckCXXCompilerFlag)

set(_miniattn_arch_default "")
set(_miniattn_arch_why "")
set(_miniattn_device_backends "")
foreach(_backend CUDA HIP SYCL OPENMPTARGET)
  if(Kokkos_ENABLE_${_backend} OR "${_backend}" IN_LIST Kokkos_DEVICES)
    list(APPEND _miniattn_device_backends ${_backend})
  endif()
endforeach()

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang)$")
  set(_miniattn_arch_why "compiler ${CMAKE_CXX_COMPILER_ID} is not GNU or Clang")
elseif(_miniattn_device_backends)
  set(_miniattn_arch_why "Kokkos has a device backend (${_miniattn_device_backends})")
elseif(Kokkos_ARCH)
  set(_miniattn_arch_why "Kokkos sets the architecture (Kokkos_ARCH=${Kokkos_ARCH})")
else()
  check_cxx_compiler_flag(-march=native MINIATTN_HAVE_MARCH_NATIVE)
  if(MINIATTN_HAVE_MARCH_NATIVE)
    set(_miniattn_arch_default "-march=native")
  else()
    check_cxx_compiler_flag(-mcpu=native MINIATTN_HAVE_MCPU_NATIVE)
    if(MINIATTN_HAVE_MCPU_NATIVE)
      set(_miniattn_arch_default "-mcpu=native")
    else()
      set(_miniattn_arch_why "the compiler accepts neither -march=native nor -mcpu=native")
    endif()
  endif()
endif()

set(_miniattn_fp_default "")
if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang)$")
  set(_miniattn_fp_default "-ffp-contract=fast")
endif()

set(MINIATTN_ARCH_FLAGS "${_miniattn_arch_default}" CACHE STRING
    "Target-CPU compile options for miniattn (default -march=native on GNU/Clang host-only builds; empty to disable)")
set(MINIATTN_FP_FLAGS "${_miniattn_fp_default}" CACHE STRING
    "Floating-point code-generation options for miniattn (default -ffp-contract=fast on GNU/Clang; empty to disable)")

set(_miniattn_codegen_flags "")
foreach(_value IN ITEMS "${MINIATTN_ARCH_FLAGS}" "${MINIATTN_FP_FLAGS}")
  if(NOT "${_value}" STREQUAL "")
    separate_arguments(_split UNIX_COMMAND "${_value}")
    list(APPEND _miniattn_codegen_flags ${_split})
  endif()
endforeach()
foreach(_flag IN LISTS _miniattn_codegen_flags)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_flag}>")
endforeach()

set(_miniattn_arch_shown "${MINIATTN_ARCH_FLAGS}")
if(_miniattn_arch_shown STREQUAL "")
  if(_miniattn_arch_why)
    set(_miniattn_arch_shown "<none>: ${_miniattn_arch_why}")
  else()
    set(_miniattn_arch_shown "<none>")
  endif()
endif()
set(_miniattn_fp_shown "${MINIATTN_FP_FLAGS}")
if(_miniattn_fp_shown STREQUAL "")
  set(_miniattn_fp_shown "<none>")
endif()
message(STATUS "miniattn: MINIATTN_ARCH_FLAGS = ${_miniattn_arch_shown}; MINIATTN_FP_FLAGS = ${_miniattn_fp_shown}")
