# -DMINIATTN_ENABLE_SANITIZERS=ON builds everything of ours with
# AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh runs the
# unit tests and a 2-rank model test that way). Third-party libraries stay
# uninstrumented; MPICH's intentional leaks at exit are not reported
# (ASAN_OPTIONS=detect_leaks=0 in that script).
option(MINIATTN_ENABLE_SANITIZERS "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)

add_library(miniattn_sanitizers INTERFACE)
if(MINIATTN_ENABLE_SANITIZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "MINIATTN_ENABLE_SANITIZERS needs GCC or Clang")
  endif()
  set(_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  # -O1 as the sanitizers' documentation advises, and line tables only (-g1:
  # a report still names file and line): instrumented code then compiles about
  # twice as fast as at -O2 -g (chunked_attention.cpp: 19 s -> 8.7 s).
  target_compile_options(miniattn_sanitizers INTERFACE ${_flags} -O1 -g1)
  target_link_options(miniattn_sanitizers INTERFACE ${_flags})
  message(STATUS "miniattn: building with AddressSanitizer + UndefinedBehaviorSanitizer")
endif()
