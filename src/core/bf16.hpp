#pragma once
// bfloat16 storage and the precision a value of each storage type computes in.
//
// bf16 is the upper half of an IEEE fp32: sign, 8 exponent bits (fp32's range),
// 7 mantissa bits. Conversion from fp32 rounds to nearest, ties to even (a NaN
// stays a quiet NaN of the same sign), in integer operations: the same bits on
// every backend as CUDA's __float2bfloat16_rn, so a CPU run rounds exactly as
// a GPU run does (Kokkos::Experimental::bhalf_t is a plain float on host-only
// builds and would never round). The bits are those of CUDA's __nv_bfloat16,
// so cuBLAS and NCCL read bf16 Views as CUDA_R_16BF / ncclBfloat16.
// bf16 has no arithmetic on purpose: kernels widen to Acc<T> (fp32), compute,
// and round once when they store.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace miniattn {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float x) : bits(round_bits(x)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
  KOKKOS_INLINE_FUNCTION static bf16 from_bits(std::uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }

  // fp32 -> bf16 bits, round to nearest even.
  KOKKOS_INLINE_FUNCTION static std::uint16_t round_bits(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet
    u += 0x7fffu + ((u >> 16) & 1u);  // a carry into the exponent rounds up to the next binade (or to inf)
    return static_cast<std::uint16_t>(u >> 16);
  }
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable<bf16>::value, "bf16 must be 16 plain bits");

// What a value stored as T computes in (Acc), and what the parameters' master
// copy, their gradients and the optimizer state are kept in (Param): the
// storage type itself for fp32 and fp64, fp32 for bf16.
template <class T>
struct PrecisionOf {
  using acc = T;
  using param = T;
};
template <>
struct PrecisionOf<bf16> {
  using acc = float;
  using param = float;
};
template <class T>
using Acc = typename PrecisionOf<T>::acc;
template <class T>
using Param = typename PrecisionOf<T>::param;

// Between a stored value and its compute type (identity unless T is bf16).
template <class T>
KOKKOS_INLINE_FUNCTION Acc<T> widen(const T& x) {
  return static_cast<Acc<T>>(x);
}
template <class T>
KOKKOS_INLINE_FUNCTION T narrow(const Acc<T>& x) {
  return T(x);
}

}  // namespace miniattn
