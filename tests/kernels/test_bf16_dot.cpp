// simd::bf16_dot_tile (kernels/base/simd_bf16_dot.hpp), both paths: against
// a float64 sum of the same bf16 products, within fp32 accumulation's bound;
// vdpbf16ps against the widened path bit for bit (where this core and build
// have it); added to what the accumulators held.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/denormals.hpp"
#include "kernels/base/simd_bf16_dot.hpp"

namespace miniattn {
namespace {

using kernels::simd::Bf16Dot;
using kernels::simd::bf16_dot_tile;
using kernels::simd::kBf16TileColumns;

constexpr int R = 8, P = 2, C = P * kBf16TileColumns;

// A [R x 2 pairs] row-major and B [2 pairs x C] stored pair-interleaved (ldb = 2 C + 6: padded rows).
struct Operands {
  index_t pairs, ldb;
  std::vector<bf16> a, b;
  float at_a(int r, index_t t) const { return static_cast<float>(a[static_cast<std::size_t>(r * 2 * pairs + t)]); }
  float at_b(index_t t, int c) const {
    return static_cast<float>(b[static_cast<std::size_t>(t / 2 * ldb + 2 * c + t % 2)]);
  }
};

Operands random_operands(index_t pairs, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operands x{pairs, 2 * C + 6, {}, {}};
  for (index_t i = 0; i < R * 2 * pairs; ++i) x.a.push_back(bf16(normal(rng)));
  for (index_t i = 0; i < pairs * x.ldb; ++i) x.b.push_back(bf16(normal(rng)));
  return x;
}

void run(Bf16Dot path, const Operands& x, float (&acc)[R][C]) {
  const bf16* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x.a.data() + r * 2 * x.pairs;
  bf16_dot_tile<R, P>(path, x.pairs, rows, x.b.data(), x.ldb, acc);
}

TEST(Bf16DotTile, BothPathsSumTheProductsWithinFp32Rounding) {
  flush_denormals_to_zero();
  for (const index_t pairs : {1, 7, 32, 300}) {
    const Operands x = random_operands(pairs, 11 + static_cast<unsigned>(pairs));
    for (const Bf16Dot path : {Bf16Dot::widened, Bf16Dot::native}) {
      float acc[R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = 0.25f * static_cast<float>(r - c);  // overwritten, not added to
      run(path, x, acc);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          double exact = 0.0, magnitude = 0.0;
          for (index_t t = 0; t < 2 * pairs; ++t) {
            exact += static_cast<double>(x.at_a(r, t)) * x.at_b(t, c);
            magnitude += std::abs(static_cast<double>(x.at_a(r, t)) * x.at_b(t, c));
          }
          // n additions in fp32, each rounding by at most 2^-24 of the running magnitude.
          const double bound = (2.0 * static_cast<double>(pairs) + 1) * std::ldexp(1.0, -24) * magnitude;
          EXPECT_NEAR(acc[r][c], exact, bound) << kernels::simd::to_string(path) << " pairs " << pairs << " row " << r
                                               << " column " << c;
        }
    }
  }
}

TEST(Bf16DotTile, VdpBf16PsAgreesBitwiseWithTheWidenedPath) {
  if (!kernels::simd::kNativeBf16Dot || kernels::simd::bf16_dot_path() != Bf16Dot::native)
    GTEST_SKIP() << "this build or core has no vdpbf16ps (or MINIATTN_BF16_DOT=widened)";
  flush_denormals_to_zero();
  const Operands x = random_operands(64, 5);
  float native[R][C] = {}, widened[R][C] = {};
  run(Bf16Dot::native, x, native);
  run(Bf16Dot::widened, x, widened);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) EXPECT_EQ(native[r][c], widened[r][c]) << "row " << r << " column " << c;
}

}  // namespace
}  // namespace miniattn
