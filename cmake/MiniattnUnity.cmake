# -DCMAKE_UNITY_BUILD=ON (CMake's own switch; .ci/run's GPU compile checks)
# compiles eight sources of a target as one translation unit, so that the
# Kokkos headers are parsed once for eight: nvcc's front end (cudafe++, cicc)
# and the host compiler spend most of a source's time on them. A source
# compiled beside others can lean on their includes; the Serial build, one
# translation unit per source, checks every include of the code it compiles,
# but not the branches only a GPU build compiles. Sources with such branches
# therefore compile alone in a unity build too.
set(MINIATTN_GPU_ONLY_CODE "KOKKOS_ENABLE_CUDA|KOKKOS_ENABLE_HIP|MINIATTN_HAVE_CUDNN|MINIATTN_HAVE_NCCL|__CUDA_ARCH__")

# Call it in the directory that creates the target (source properties are
# seen by the targets of the directory that sets them).
function(miniattn_compile_gpu_branches_alone target)
  if(NOT CMAKE_UNITY_BUILD)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  foreach(source IN LISTS sources)
    if(source MATCHES "\\.cpp$")
      file(STRINGS "${source}" gpu_lines REGEX "${MINIATTN_GPU_ONLY_CODE}" LIMIT_COUNT 1)
      if(gpu_lines)
        set_source_files_properties("${source}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endif()
  endforeach()
endfunction()
