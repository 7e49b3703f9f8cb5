#pragma once
// bf16 products with fp32 accumulation on the host: the register tile of
// C += A B for bf16 A and B, on AVX512-BF16's vdpbf16ps where the build
// targets it (32 bf16 products in pairs into 16 fp32 lanes an instruction:
// twice an fp32 FMA's), else on operands widened to fp32 (any host). The
// path is chosen at run time (bf16_dot_path), so that one build can play a
// core without bf16 dot products. Beside simd_pack.hpp, whose fp32 register
// tile (kernels/attention/fused/fused_tiles.hpp) this one mirrors: the
// bf16 products of a fused host attention kernel are to run through it.
//
// Layouts (the inner dimension in pairs, as vdpbf16ps takes it):
//   A: R rows, each `2 pairs` bf16 contiguous (a row of a row-major matrix);
//   B: pair-interleaved, b[t * ldb + 2 c + h] = B(2 t + h, c) for column c,
//      h = 0, 1 (ldb >= 2 x the tile's columns);
//   C: acc[r][c], c < kBf16TileColumns x P, fp32.
// An odd inner dimension is padded by the caller with a zero half-pair.
//
// Both paths add the odd product, then the even one, each rounded once (a
// product of two bf16 is exact in fp32): vdpbf16ps's order (Intel SDM), so
// the paths agree bit for bit on normal numbers. vdpbf16ps flushes denormal
// inputs and results to zero, as the widened path does under the FTZ/DAZ
// modes miniattn sets (core/denormals.hpp).
// Kokkos (through core/bf16.hpp) before <cstring>, for HIP's device memcpy
// (kernels/attention/fused/bf16_tiles.hpp says why).
#include "core/bf16.hpp"
#include "core/types.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

// The intrinsics only where a host compiler alone compiles the file: GPU
// builds (nvcc, hipcc) never run bf16 products on the host.
#if defined(__AVX512BF16__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define MINIATTN_NATIVE_BF16_DOT 1
#include <immintrin.h>
#else
#define MINIATTN_NATIVE_BF16_DOT 0
#endif

namespace miniattn::kernels::simd {

// fp32 accumulators of one pack of a bf16 tile: a 512-bit register.
constexpr int kBf16TileColumns = 16;

// The widened path widens every pair it meets: it runs at half the fp32
// tile's rate (tests/kernels/bench_bf16_dot.cpp; vdpbf16ps at twice it, on a
// Zen 5). A kernel on a core without bf16 dot products should widen its
// staged tiles once and run the fp32 tile; here it is the reference and the
// way to play such a core.
enum class Bf16Dot {
  native,   // vdpbf16ps
  widened,  // bf16 widened to fp32, FMAs
};

// Whether this build targets vdpbf16ps (-march=native on a core with AVX512-BF16).
constexpr bool kNativeBf16Dot = MINIATTN_NATIVE_BF16_DOT;

// The path the kernels take: native where built for and the CPU has it,
// unless MINIATTN_BF16_DOT=widened (a core without bf16 dot products, played).
inline Bf16Dot bf16_dot_path() {
  static const Bf16Dot path = [] {
    const char* forced = std::getenv("MINIATTN_BF16_DOT");
    if (forced != nullptr && std::string(forced) == "widened") return Bf16Dot::widened;
#if MINIATTN_NATIVE_BF16_DOT
    if (__builtin_cpu_supports("avx512bf16")) return Bf16Dot::native;
#endif
    return Bf16Dot::widened;
  }();
  return path;
}

inline const char* to_string(Bf16Dot path) { return path == Bf16Dot::native ? "vdpbf16ps" : "widened to fp32"; }

namespace bf16_dot_detail {

inline float low_half(std::uint32_t pair) {  // the even element of a pair, as fp32
  const std::uint32_t bits = pair << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline float high_half(std::uint32_t pair) {  // the odd element
  const std::uint32_t bits = pair & 0xFFFF0000u;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline std::uint32_t pair_at(const bf16* p) {
  std::uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

template <int R, int P>
void widened_tile(index_t pairs, const bf16* const (&a)[R], const bf16* b, index_t ldb,
                  float (&acc)[R][P * kBf16TileColumns]) {
  constexpr int C = P * kBf16TileColumns;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  for (index_t t = 0; t < pairs; ++t) {
    float even[C], odd[C];
    for (int c = 0; c < C; ++c) {
      const std::uint32_t pair = pair_at(b + t * ldb + 2 * c);
      even[c] = low_half(pair);
      odd[c] = high_half(pair);
    }
    for (int r = 0; r < R; ++r) {
      const std::uint32_t pair = pair_at(a[r] + 2 * t);
      const float a_even = low_half(pair), a_odd = high_half(pair);
      for (int c = 0; c < C; ++c) {
        acc[r][c] += a_odd * odd[c];
        acc[r][c] += a_even * even[c];
      }
    }
  }
}

#if MINIATTN_NATIVE_BF16_DOT
template <int R, int P>
void native_tile(index_t pairs, const bf16* const (&a)[R], const bf16* b, index_t ldb,
                 float (&acc)[R][P * kBf16TileColumns]) {
  __m512 sum[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) sum[r][p] = _mm512_setzero_ps();
  for (index_t t = 0; t < pairs; ++t) {
    __m512bh bv[P];
    for (int p = 0; p < P; ++p) bv[p] = (__m512bh)_mm512_loadu_si512(b + t * ldb + 2 * p * kBf16TileColumns);
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_at(a[r] + 2 * t)));
      for (int p = 0; p < P; ++p) sum[r][p] = _mm512_dpbf16_ps(sum[r][p], av, bv[p]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(&acc[r][p * kBf16TileColumns], sum[r][p]);
}
#endif

}  // namespace bf16_dot_detail

// acc[r][c] = sum over t < 2 pairs of A(r, t) B(t, c), for R rows and
// P x kBf16TileColumns columns, on `path` (bf16_dot_path(); native falls back
// to widened in a build that does not target vdpbf16ps).
template <int R, int P>
void bf16_dot_tile(Bf16Dot path, index_t pairs, const bf16* const (&a)[R], const bf16* b, index_t ldb,
                   float (&acc)[R][P * kBf16TileColumns]) {
#if MINIATTN_NATIVE_BF16_DOT
  if (path == Bf16Dot::native) return bf16_dot_detail::native_tile<R, P>(pairs, a, b, ldb, acc);
#endif
  (void)path;
  bf16_dot_detail::widened_tile<R, P>(pairs, a, b, ldb, acc);
}

}  // namespace miniattn::kernels::simd
