#pragma once
// SIMD "packs" for the host and the exp every kernel shares, in one source for
// host and device backends.
//
// A pack is what one vector lane works on at once: on host backends a whole
// SIMD register (GCC/Clang vector extensions: 16 floats or 8 doubles with
// AVX-512, 8 / 4 with AVX2), on GPU backends one scalar (the GPU's lanes are
// its threads). Kernels written on packs therefore vectorise on the CPU and
// coalesce on the GPU with the same code. Also here: pack_exp, a branch-free
// exp on whole packs (libm's expf/exp are scalar calls), and row_packs(), the
// loop over [rows x columns] data one pack at a time.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/kokkos_compat.hpp"
#include "core/types.hpp"

// GCC-style vector extensions (GCC, Clang and the compilers built on them) for
// the host packs; elsewhere a pack is one scalar and the compiler may
// vectorise what it can.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    !defined(__SYCL_DEVICE_ONLY__) && !defined(__NVCOMPILER)
#define MINIATTN_HOST_SIMD 1
#else
#define MINIATTN_HOST_SIMD 0
#endif
// The AVX-512 intrinsics pack_exp uses, at file scope: the first include of
// them inside the namespace below would declare them there.
#if MINIATTN_HOST_SIMD && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace miniattn::kernels::simd {

// Width of the SIMD registers the host compiler targets.
#if defined(__AVX512F__)
constexpr int kHostVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kHostVectorBytes = 32;
#else
constexpr int kHostVectorBytes = 16;  // SSE2, NEON
#endif

#if MINIATTN_HOST_SIMD
// Non-template typedefs: a vector_size attribute on a dependent type does not
// survive as a template argument.
typedef float host_float_vector __attribute__((vector_size(kHostVectorBytes)));
typedef double host_double_vector __attribute__((vector_size(kHostVectorBytes)));
typedef std::uint32_t host_uint32_vector __attribute__((vector_size(kHostVectorBytes)));
typedef std::uint64_t host_uint64_vector __attribute__((vector_size(kHostVectorBytes)));
// As many 16-bit words as a float pack has lanes: a pack of bf16 in memory.
typedef std::uint16_t host_bf16_bits_vector __attribute__((vector_size(kHostVectorBytes / 2)));
#endif

// Pack<T>: the values of T one lane works on at once (type), the matching
// unsigned-integer pack for bit manipulation (bits), and its length (lanes).
template <class T>
struct Pack;
template <>
struct Pack<float> {
#if MINIATTN_HOST_SIMD
  static constexpr int lanes = kHostExecution ? kHostVectorBytes / 4 : 1;
  using type = std::conditional_t<kHostExecution, host_float_vector, float>;
  using bits = std::conditional_t<kHostExecution, host_uint32_vector, std::uint32_t>;
#else
  static constexpr int lanes = 1;
  using type = float;
  using bits = std::uint32_t;
#endif
};
template <>
struct Pack<double> {
#if MINIATTN_HOST_SIMD
  static constexpr int lanes = kHostExecution ? kHostVectorBytes / 8 : 1;
  using type = std::conditional_t<kHostExecution, host_double_vector, double>;
  using bits = std::conditional_t<kHostExecution, host_uint64_vector, std::uint64_t>;
#else
  static constexpr int lanes = 1;
  using type = double;
  using bits = std::uint64_t;
#endif
};
static_assert(sizeof(Pack<float>::type) == Pack<float>::lanes * sizeof(float), "float pack");
static_assert(sizeof(Pack<double>::type) == Pack<double>::lanes * sizeof(double), "double pack");
static_assert(sizeof(Pack<float>::bits) == sizeof(Pack<float>::type), "float bits pack");
static_assert(sizeof(Pack<double>::bits) == sizeof(Pack<double>::type), "double bits pack");

// Full unrolling of the short fixed-length loops over a register tile: without
// it GCC keeps the accumulators in memory.
#if defined(__clang__)
#define MINIATTN_UNROLL _Pragma("unroll")
#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__NVCOMPILER)
#define MINIATTN_UNROLL _Pragma("GCC unroll 64")
#else
#define MINIATTN_UNROLL
#endif

// Element type of a pack (a scalar is a pack of one).
template <class V, class = void>
struct ElementOf {
  using type = V;
};
template <class V>
struct ElementOf<V, std::enable_if_t<!std::is_arithmetic<V>::value>> {
  using type = std::decay_t<decltype(std::declval<V>()[0])>;
};

template <class V, class E, std::size_t... I>
KOKKOS_FORCEINLINE_FUNCTION V pack_splat_impl(const E x, std::index_sequence<I...>) {
  return V{((void)I, x)...};  // an initialiser list the compiler turns into one broadcast
}

// x in every lane.
template <class V>
KOKKOS_FORCEINLINE_FUNCTION V pack_splat(const typename ElementOf<V>::type x) {
  if constexpr (std::is_arithmetic<V>::value) {
    return x;
  } else {
    using E = typename ElementOf<V>::type;
    return pack_splat_impl<V>(x, std::make_index_sequence<sizeof(V) / sizeof(E)>());
  }
}

// Lane i of a pack.
template <class V>
KOKKOS_FORCEINLINE_FUNCTION typename ElementOf<V>::type pack_lane(const V& v, int i) {
  if constexpr (std::is_arithmetic<V>::value) {
    (void)i;
    return v;
  } else {
    return v[i];
  }
}

template <class V, class T>
KOKKOS_FORCEINLINE_FUNCTION V pack_load(const T* p) {
  if constexpr (std::is_same<V, T>::value) {
    return *p;
  } else {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
}

template <class V, class T>
KOKKOS_FORCEINLINE_FUNCTION void pack_store(T* p, const V& v) {
  if constexpr (std::is_same<V, T>::value) {
    *p = v;
  } else {
    std::memcpy(p, &v, sizeof(V));
  }
}

template <class To, class From>
KOKKOS_FORCEINLINE_FUNCTION To pack_bit_cast(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between packs of different sizes");
  To y;
  std::memcpy(&y, &x, sizeof(To));
  return y;
}

// exp(x) on a whole pack without branches or calls. x = k ln2 + r with
// |r| <= ln2/2 (ln2 split in two so that k ln2_hi is exact), exp(r) by a
// polynomial, 2^k applied exactly (vscalef where the host has AVX-512, else
// written into the exponent bits). Arguments below log(smallest normal) give 0
// (-inf included); arguments above 88 (float) / 709 (double) give inf with
// vscalef and exp(88) / exp(709) without it: the kernels only call it with
// x <= 0 (up to rounding). A NaN stays NaN.
// The polynomial is ExpConstants' (C): Taylor's, degree 7 for float
// (truncation 5e-9) and 13 for double (4e-18), both below half an ulp.
template <class T, int N>
struct InverseFactorials {  // 1/i!, i = 0 .. N, rounded once from double (factorials exact up to 18!)
  T value[N + 1];
  constexpr InverseFactorials() : value{} {
    double factorial = 1.0;
    for (int i = 0; i <= N; ++i) {
      if (i > 1) factorial *= i;
      value[i] = static_cast<T>(1.0 / factorial);
    }
  }
};

template <class T>
struct ExpConstants;
template <>
struct ExpConstants<float> {
  static constexpr int degree = 7, mantissa_bits = 23, bias = 127;
  static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  static constexpr float lowest = -87.3365447f, highest = 88.0f;
  static constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: x + magic - magic rounds x to an integer
  static constexpr InverseFactorials<float, degree> coefficients{};
};
template <>
struct ExpConstants<double> {
  static constexpr int degree = 13, mantissa_bits = 52, bias = 1023;
  static constexpr double ln2_hi = 6.93145751953125e-1, ln2_lo = 1.42860682030941723212e-6;
  static constexpr double lowest = -708.396418532264, highest = 709.0;
  static constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr InverseFactorials<double, degree> coefficients{};
};

// The exp of values rounded to bf16 next (the bf16 kernels' probabilities):
// float's range reduction with a degree-5 polynomial on [-ln2/2, ln2/2]
// fitted for the least largest relative error (9e-8 in exact arithmetic;
// within 2 ulps of float evaluated, tests/kernels/test_pack_exp.cpp), two
// FMAs fewer than float's and four orders of magnitude below bf16's rounding
// (2^-9).
struct ExpForBf16 : ExpConstants<float> {
  static constexpr int degree = 5;
  struct Coefficients {
    float value[degree + 1];
  };
  static constexpr Coefficients coefficients{
      {1.0f, 0.9999997020f, 0.4999915063f, 0.1666763574f, 0.04189793020f, 0.008290315047f}};
};

#if MINIATTN_HOST_SIMD && defined(__AVX512F__)
// p 2^k on AVX-512 (vscalef: exact, one instruction), 0 where x < lowest; a
// NaN lane of x compares unordered and stays NaN.
KOKKOS_FORCEINLINE_FUNCTION host_float_vector scale_by_power_of_two(host_float_vector p, host_float_vector k,
                                                                    host_float_vector x, float lowest) {
  const __mmask16 in_range = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(lowest), _CMP_NLT_UQ);
  return (host_float_vector)_mm512_maskz_scalef_ps(in_range, (__m512)p, (__m512)k);
}
KOKKOS_FORCEINLINE_FUNCTION host_double_vector scale_by_power_of_two(host_double_vector p, host_double_vector k,
                                                                     host_double_vector x, double lowest) {
  const __mmask8 in_range = _mm512_cmp_pd_mask((__m512d)x, _mm512_set1_pd(lowest), _CMP_NLT_UQ);
  return (host_double_vector)_mm512_maskz_scalef_pd(in_range, (__m512d)p, (__m512d)k);
}
#endif

// The reduction x = k ln2 + r and exp(r) by the polynomial (exp(x) = exp(r)
// 2^k): returns exp(r), with k and t, whose low mantissa bits hold k (offset
// from the magic number's).
template <class T, class C>
KOKKOS_FORCEINLINE_FUNCTION typename Pack<T>::type exp_reduced(const typename Pack<T>::type x,
                                                               typename Pack<T>::type& t, typename Pack<T>::type& k) {
  using V = typename Pack<T>::type;
  const V magic = pack_splat<V>(C::round_magic);
  t = x * pack_splat<V>(T(1.442695040888963407359924681001892137L)) + magic;  // round(x log2 e) + magic
  k = t - magic;
  V r = x - k * pack_splat<V>(C::ln2_hi);
  r = r - k * pack_splat<V>(C::ln2_lo);
  V p = pack_splat<V>(C::coefficients.value[C::degree]);
  MINIATTN_UNROLL
  for (int i = C::degree - 1; i >= 0; --i) p = p * r + pack_splat<V>(C::coefficients.value[i]);
  return p;
}

template <class T, class C = ExpConstants<T>>
KOKKOS_FORCEINLINE_FUNCTION typename Pack<T>::type pack_exp(const typename Pack<T>::type x) {
  using V = typename Pack<T>::type;
  using B = typename Pack<T>::bits;
  V t, k;
#if MINIATTN_HOST_SIMD && defined(__AVX512F__)
  // Unclamped: vscalef's mask zeroes the lanes below the range whatever their
  // reduction made of them (NaN for -inf), and 2^k overflows to inf above it;
  // two instructions of an exp's 13.
  if constexpr (sizeof(V) == kHostVectorBytes) {
    const V p = exp_reduced<T, C>(x, t, k);
    return scale_by_power_of_two(p, k, x, C::lowest);
  }
#endif
  const V lowest = pack_splat<V>(C::lowest), highest = pack_splat<V>(C::highest);
  const V lo = x < lowest ? lowest : x;
  const V p = exp_reduced<T, C>(lo > highest ? highest : lo, t, k);
  // 2^k from t's bits.
  const B magic_bits = pack_bit_cast<B>(pack_splat<V>(C::round_magic));
  const B scale_bits = (pack_bit_cast<B>(t) - magic_bits + pack_splat<B>(C::bias)) << C::mantissa_bits;
  const B kept_bits = x < lowest ? pack_splat<B>(0) : scale_bits;  // 2^k, or 0 below the range
  return p * pack_bit_cast<V>(kept_bits);
}

// exp for the kernels: the pack version on the host (C's polynomial), the
// backend's on GPUs.
template <class T, class C = ExpConstants<T>>
KOKKOS_FORCEINLINE_FUNCTION typename Pack<T>::type kernel_exp(const typename Pack<T>::type x) {
  if constexpr (kHostExecution) {
    return pack_exp<T, C>(x);
  } else {
    return compat::exp(x);
  }
}
// The first `width` elements at p as a pack, zero past them (width <= lanes).
template <class V, class T>
KOKKOS_FORCEINLINE_FUNCTION V pack_load_n(const T* p, int width) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(T));
  if (width == lanes) return pack_load<V>(p);
  // Every lane written, none read past width: a loop to width alone became a
  // memcpy whose length GCC's -Warray-bounds could not bound by lanes.
  T padded[lanes];
  for (int i = 0; i < lanes; ++i) padded[i] = i < width ? p[i] : T(0);
  return pack_load<V>(padded);
}

// Stores the first `width` lanes of v at p.
template <class V, class T>
KOKKOS_FORCEINLINE_FUNCTION void pack_store_n(T* p, const V& v, int width) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(T));
  if (width == lanes) {
    pack_store(p, v);
    return;
  }
  T padded[lanes];
  pack_store(padded, v);
  for (int i = 0; i < width; ++i) p[i] = padded[i];
}

// The bf16 bits of fp32 values (the bits u of a float pack, any width),
// rounded to nearest even with NaN kept quiet as bf16::round_bits does it one
// value at a time, in the low half of each 32-bit lane: narrow_pack's words,
// and (lo | hi << 16) the pairs that bf16 dot products take.
template <class B>
KOKKOS_FORCEINLINE_FUNCTION B bf16_bits_of(const B& u) {
  const B rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const B quiet_nan = (u >> 16) | 0x0040u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

#if MINIATTN_HOST_SIMD
// A whole pack of bf16 widened (a shift of each 16-bit word into the top of a
// 32-bit one) and a float pack rounded to bf16 (bf16_bits_of), on SIMD registers.
KOKKOS_FORCEINLINE_FUNCTION host_float_vector widen_pack(const bf16* p) {
  host_bf16_bits_vector words;
  std::memcpy(&words, p, sizeof words);
  return pack_bit_cast<host_float_vector>(__builtin_convertvector(words, host_uint32_vector) << 16);
}
KOKKOS_FORCEINLINE_FUNCTION void narrow_pack(bf16* p, const host_float_vector& v) {
  const host_uint32_vector bits = bf16_bits_of(pack_bit_cast<host_uint32_vector>(v));
  const host_bf16_bits_vector words = __builtin_convertvector(bits, host_bf16_bits_vector);
  std::memcpy(static_cast<void*>(p), &words, sizeof words);
}
#endif

// Values stored as T (fp32, fp64 or bf16) as packs of their compute type
// Acc<T>, and back, rounded to T (bf16 widens exactly and rounds to nearest
// even; fp32 and fp64 load and store as they are).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION typename Pack<Acc<T>>::type load_n(const T* p, int width) {
  using V = typename Pack<Acc<T>>::type;
  if constexpr (std::is_same<T, Acc<T>>::value) {
    return pack_load_n<V>(p, width);
  } else {
#if MINIATTN_HOST_SIMD
    if constexpr (kHostExecution) {
      if (width == Pack<Acc<T>>::lanes) return widen_pack(p);
    }
#endif
    Acc<T> wide[Pack<Acc<T>>::lanes] = {};
    for (int i = 0; i < width; ++i) wide[i] = widen(p[i]);
    return pack_load<V>(wide);
  }
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void store_n(T* p, const typename Pack<Acc<T>>::type& v, int width) {
  if constexpr (std::is_same<T, Acc<T>>::value) {
    pack_store_n(p, v, width);
  } else {
#if MINIATTN_HOST_SIMD
    if constexpr (kHostExecution) {
      if (width == Pack<Acc<T>>::lanes) return narrow_pack(p, v);
    }
#endif
    Acc<T> wide[Pack<Acc<T>>::lanes];
    pack_store(wide, v);
    for (int i = 0; i < width; ++i) p[i] = narrow<T>(wide[i]);
  }
}

// *dst = *src for `width` values of one pack (bf16 through fp32 and back: exact).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void copy_n(T* dst, const T* src, int width) {
  store_n(dst, load_n(src, width), width);
}

// The lanes combined pairwise: lane i with lane i + half, halving until one
// is left (the same bits on every run). In lane order a sum was a chain of
// dependent scalar adds, a fifth of the bf16 forward's row kernel, whose rows
// sum 8 packs each (perf annotate, Xeon, 2026-11-29).
template <class V, class Combine>
KOKKOS_FORCEINLINE_FUNCTION typename ElementOf<V>::type pack_fold(const V& v, const Combine& combine) {
  using T = typename ElementOf<V>::type;
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(T));
  T x[lanes];
  pack_store(x, v);
  for (int half = lanes / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) x[i] = combine(x[i], x[i + half]);
  return x[0];
}

// Sum of the lanes, pairwise.
template <class V>
KOKKOS_FORCEINLINE_FUNCTION typename ElementOf<V>::type pack_sum(const V& v) {
  using T = typename ElementOf<V>::type;
  return pack_fold(v, [](const T a, const T b) { return a + b; });
}

// Largest lane, pairwise (NaN lanes lose every comparison).
template <class V>
KOKKOS_FORCEINLINE_FUNCTION typename ElementOf<V>::type pack_max(const V& v) {
  using T = typename ElementOf<V>::type;
  return pack_fold(v, [](const T a, const T b) { return b > a ? b : a; });
}

// 1 / (1 + exp(-x)) on a pack: exact in relative terms over the whole range
// (no 1 - something cancellation), finite for every finite x.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION typename Pack<T>::type pack_sigmoid(const typename Pack<T>::type x) {
  using V = typename Pack<T>::type;
  const V one = pack_splat<V>(T(1));
  return one / (one + kernel_exp<T>(-x));
}

// The device's map of row_packs over a [rows x cols] array: thread t of
// threads() keeps column t % cols and walks rows t / cols, + sweep_rows, ...
// Consecutive threads take consecutive columns (coalesced), a thread divides
// once, not once an element, and sweep_rows whole rows fill the device once.
// One thread an element, the first map, spent its time launching blocks of
// 128 threads, not moving bytes: on an H200 (2026-11-28, Nsight Compute) the
// bias broadcast of a 32768 x 1024 bf16 output took 160 us for 67 MB written.
// Host-callable: the tests walk every thread of it on the host.
struct RowSweep {
  index_t rows, cols, sweep_rows;
  KOKKOS_INLINE_FUNCTION index_t threads() const { return sweep_rows * cols; }
  MINIATTN_HOST_OR_DEVICE_TEMPLATE
  template <class F>
  KOKKOS_FORCEINLINE_FUNCTION void visit(index_t t, const F& f) const {
    const index_t first_row = t / cols, c = t - first_row * cols;
    for (index_t r = first_row; r < rows; r += sweep_rows) f(r, c);
  }
};
// rows, cols > 0; device_threads: how many threads the device holds at once.
inline RowSweep row_sweep(index_t rows, index_t cols, index_t device_threads) {
  const index_t whole_rows = device_threads / cols;
  return {rows, cols, whole_rows < 1 ? 1 : (whole_rows < rows ? whole_rows : rows)};
}

// Calls f(r, c0, width) for every row r < rows and every pack of columns
// c0, c0 + width - 1 (width = lanes, less at the end of a row) of a
// [rows x cols] array. Host: rows in parallel, a row's packs in order (SIMD).
// Device: every (row, column) in parallel, width 1, as RowSweep maps them.
template <class T, class F>
void row_packs(const char* label, index_t rows, index_t cols, const F& f) {
  if (rows <= 0 || cols <= 0) return;
  if constexpr (kHostExecution) {
    constexpr int lanes = Pack<T>::lanes;
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, rows), KOKKOS_LAMBDA(const index_t r) {
          for (index_t c0 = 0; c0 < cols; c0 += lanes) f(r, c0, cols - c0 < lanes ? int(cols - c0) : lanes);
        });
  } else {
    const RowSweep sweep = row_sweep(rows, cols, static_cast<index_t>(ExecSpace().concurrency()));
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, sweep.threads()),
        KOKKOS_LAMBDA(const index_t t) { sweep.visit(t, [&](const index_t r, const index_t c) { f(r, c, 1); }); });
  }
}

}  // namespace miniattn::kernels::simd
