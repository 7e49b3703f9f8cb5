#include "core/denormals.hpp"

#if defined(__SSE__) || defined(_M_X64)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

namespace miniattn {

bool flush_denormals_to_zero() {
#if defined(__SSE__) || defined(_M_X64)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  return true;
#elif defined(__aarch64__)
  unsigned long fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= 1UL << 24;  // FZ
  asm volatile("msr fpcr, %0" : : "r"(fpcr));
  return true;
#else
  return false;
#endif
}

}  // namespace miniattn
