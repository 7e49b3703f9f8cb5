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
  target_compile_options(miniattn_sanitizers INTERFACE ${_flags})
  target_link_options(miniattn_sanitizers INTERFACE ${_flags})
  message(STATUS "miniattn: building with AddressSanitizer + UndefinedBehaviorSanitizer")
endif()
