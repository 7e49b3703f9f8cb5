#pragma once
// The one place that knows which Kokkos version we build against. Everything
// else uses these names, which exist from Kokkos 3.4 (Debian) to Kokkos 4.x/5.x.
#include <Kokkos_Core.hpp>

#include <limits>
#include <string>

#if KOKKOS_VERSION >= 30700
#define MINIATTN_KOKKOS_MATH_NS Kokkos
#else
#define MINIATTN_KOKKOS_MATH_NS Kokkos::Experimental
#endif

// A host-and-device template that its host tests call with host-only
// lambdas (the block walk, the GPU row lanes): nvcc's check of that call is
// turned off for it, as CUDA's own libraries (CCCL: _CCCL_EXEC_CHECK_DISABLE)
// do for theirs.
#if defined(__CUDACC__)
#define MINIATTN_HOST_OR_DEVICE_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define MINIATTN_HOST_OR_DEVICE_TEMPLATE
#endif

namespace miniattn::compat {

// Math functions moved from Kokkos::Experimental to Kokkos in 3.7; the
// Experimental names are gone in 4.3.
template <class T>
KOKKOS_INLINE_FUNCTION T exp(T x) { return MINIATTN_KOKKOS_MATH_NS::exp(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T log(T x) { return MINIATTN_KOKKOS_MATH_NS::log(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T sqrt(T x) { return MINIATTN_KOKKOS_MATH_NS::sqrt(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T cos(T x) { return MINIATTN_KOKKOS_MATH_NS::cos(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T sin(T x) { return MINIATTN_KOKKOS_MATH_NS::sin(x); }
template <class T>
KOKKOS_INLINE_FUNCTION bool isfinite(T x) { return MINIATTN_KOKKOS_MATH_NS::isfinite(x); }

// +infinity, usable in device code (std::numeric_limits is host-only for nvcc);
// Kokkos's numeric traits exist from 3.6, and Kokkos 3.4 builds are host-only.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T infinity() {
#if KOKKOS_VERSION >= 30600
  return Kokkos::Experimental::infinity<T>::value;
#else
  return std::numeric_limits<T>::infinity();
#endif
}

// Math constants live in Kokkos::numbers only from 4.0.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T pi() { return static_cast<T>(3.141592653589793238462643383279502884L); }

// Labelled fences exist from 3.5. Since Kokkos 4.0 CUDA/HIP no longer
// synchronise implicitly, so callers fence before handing View data to MPI,
// NCCL or HDF5.
inline void fence(const std::string& label) {
#if KOKKOS_VERSION >= 30500
  Kokkos::fence(label);
#else
  (void)label;
  Kokkos::fence();
#endif
}

// Kokkos::Profiling::ScopedRegion exists from 4.1; push/pop works everywhere.
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ProfilingRegion() { Kokkos::Profiling::popRegion(); }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;
};

}  // namespace miniattn::compat
