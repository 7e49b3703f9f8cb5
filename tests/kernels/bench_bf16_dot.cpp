// The rate of the bf16 dot-product register tile (kernels/base/simd_bf16_dot.hpp)
// on this core, both paths, against the fp32 register tile the fused attention
// kernel runs (kernels/attention/fused/fused_tiles.hpp), measured in one run
// (prints only; not a test). The same 8 x 32 tile and depth for all three,
// operands in L1, one thread, timed by the thread's CPU time: the ceiling a
// fused bf16 kernel's products could reach against the fp32 kernel's.
//
// Usage: bench_bf16_dot [depth]   (the inner dimension, default 64: a head width)
#include <Kokkos_Core.hpp>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/denormals.hpp"
#include "kernels/attention/fused/fused_tiles.hpp"
#include "kernels/base/simd_bf16_dot.hpp"

namespace {

using namespace miniattn;
using kernels::simd::Bf16Dot;
using kernels::simd::kBf16TileColumns;

constexpr int R = 8, P = 2, C = P * kBf16TileColumns;
constexpr long kCalls = 200000;

// This thread's CPU seconds: steady on a machine shared with other work,
// which takes time slices, not this thread's cycles.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Seconds of kCalls calls of `tile`, the best of 3.
template <class Tile>
double best_seconds(const Tile& tile) {
  double best = 1e30;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const double start = thread_seconds();
    for (long i = 0; i < kCalls; ++i) tile();
    best = std::min(best, thread_seconds() - start);
  }
  return best;
}

double bf16_rate(Bf16Dot path, index_t depth) {
  const index_t pairs = depth / 2, ldb = 2 * C;
  std::vector<bf16> a(static_cast<std::size_t>(R * depth), bf16(0.5f)), b(static_cast<std::size_t>(pairs * ldb),
                                                                           bf16(0.25f));
  const bf16* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.data() + r * depth;
  float acc[R][C] = {};
  const double seconds = best_seconds([&] {
    kernels::simd::bf16_dot_tile<R, P>(path, pairs, rows, b.data(), ldb, acc);
    asm volatile("" : : "r"(&acc[0][0]) : "memory");  // keep every call
  });
  return 2.0 * R * C * static_cast<double>(depth) * kCalls / seconds;
}

double fp32_rate(index_t depth) {
  using V = kernels::simd::Pack<float>::type;
  constexpr int FP = kernels::attention_detail::Tiling<float>::P, W = kernels::attention_detail::Tiling<float>::W;
  // Transposed as the fused kernel's operands are: A(r, t) = a[t * R + r] (a_step R), B rows of W, 64-byte aligned.
  std::vector<float> a(static_cast<std::size_t>(R * depth), 0.5f);
  float* const b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * static_cast<std::size_t>(depth * W)));
  std::fill(b, b + depth * W, 0.25f);
  const float* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.data() + r;
  V acc[R][FP];
  const double seconds = best_seconds([&] {
    kernels::attention_detail::register_tile<R, FP, false>(depth, rows, index_t(R), b, index_t(W), W, acc);
    asm volatile("" : : "r"(&acc[0][0]) : "memory");
  });
  std::free(b);
  return 2.0 * R * W * static_cast<double>(depth) * kCalls / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  flush_denormals_to_zero();
  const index_t depth = argc > 1 ? std::atol(argv[1]) : 64;
  const double fp32 = fp32_rate(depth);
  std::printf("register tile %d x %d, depth %ld, one thread, operands in L1\n", R, C, static_cast<long>(depth));
  std::printf("fp32 (the fused kernel's tile)  %8.1f GFLOP/s\n", fp32 / 1e9);
  std::printf("bf16 widened to fp32            %8.1f GFLOP/s  %.2fx fp32\n", bf16_rate(Bf16Dot::widened, depth) / 1e9,
              bf16_rate(Bf16Dot::widened, depth) / fp32);
  if (kernels::simd::kNativeBf16Dot && kernels::simd::bf16_dot_path() == Bf16Dot::native) {
    const double native = bf16_rate(Bf16Dot::native, depth);
    std::printf("bf16 vdpbf16ps                  %8.1f GFLOP/s  %.2fx fp32\n", native / 1e9, native / fp32);
  } else {
    std::printf("bf16 vdpbf16ps                  not on this build or core (or MINIATTN_BF16_DOT=widened)\n");
  }
  return 0;
}
