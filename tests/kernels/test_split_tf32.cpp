// fp32 products as three TF32 products (kernels/split_tf32.hpp): the split
// itself, the scheme's error with the tensor cores' reading of fp32 emulated
// on the host (either rounding a library may use), and batched_gemm's split
// path, which runs here through the fp32 BLAS on the same parts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "kernel_test_util.hpp"
#include "kernels/batched_gemm.hpp"
#include "kernels/split_tf32.hpp"

namespace miniattn::ktest {
namespace {

using kernels::tf32_big;

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// A tensor core's reading of an fp32 operand as TF32: its low 13 bits dropped
// (truncate) or rounded to nearest even.
float read_truncated(float x) { return from_bits(bits_of(x) & 0xffffe000u); }
float read_rounded(float x) { return tf32_big(x); }

TEST(SplitTf32, BigIsTf32AndSmallIsTheExactRemainder) {
  Random rng(7);
  for (const double v : rng.uniform(20000, -3.0, 3.0)) {
    for (const float x : {float(v), float(v) * 1e-20f, float(v) * 1e20f}) {
      const float big = tf32_big(x), small = x - big;
      ASSERT_EQ(bits_of(big) & 0x1fffu, 0u) << x;                       // 10 fraction bits
      ASSERT_EQ(double(big) + double(small), double(x)) << x;           // nothing lost
      ASSERT_LE(std::fabs(double(small)), 0x1p-11 * std::fabs(double(x))) << x;  // to nearest
    }
  }
}

TEST(SplitTf32, RoundsHalfwayCasesToEven) {
  const std::uint32_t one = bits_of(1.0f);
  EXPECT_EQ(bits_of(tf32_big(from_bits(one | 0x1000u))), one);                  // tie, even below: down
  EXPECT_EQ(bits_of(tf32_big(from_bits(one | 0x3000u))), one + 0x4000u);        // tie, odd below: up
  EXPECT_EQ(bits_of(tf32_big(from_bits(one | 0x1001u))), one + 0x2000u);        // past the tie: up
  EXPECT_EQ(tf32_big(from_bits(bits_of(2.0f) - 1u)), 2.0f);                     // carry into the exponent
  EXPECT_TRUE(std::isinf(tf32_big(INFINITY)));
  EXPECT_TRUE(std::isnan(tf32_big(NAN)));
}

// sum_p A[p] B[p] three ways from fp32 operands, in float64 so that only the
// operands' reading counts: the split's three products, and one plain TF32
// product (what CUBLAS_COMPUTE_32F_FAST_TF32 on unsplit operands gives).
struct DotErrors {
  double split = 0, plain = 0;  // relative to sum_p |A[p] B[p]|, worst over the trials
};
DotErrors dot_errors(const std::function<float(float)>& read, int k, int trials) {
  Random rng(11);
  DotErrors worst;
  for (int t = 0; t < trials; ++t) {
    const HostVec a = rng.uniform(k, -1, 1), b = rng.uniform(k, -1, 1);
    double exact = 0, magnitude = 0, split = 0, plain = 0;
    for (int p = 0; p < k; ++p) {
      const float x = float(a[p]), y = float(b[p]);
      const float bx = tf32_big(x), by = tf32_big(y), sx = x - bx, sy = y - by;
      exact += double(x) * double(y);
      magnitude += std::fabs(double(x) * double(y));
      split += double(read(bx)) * read(sy) + double(read(sx)) * read(by) + double(read(bx)) * read(by);
      plain += double(read(x)) * read(y);
    }
    worst.split = std::max(worst.split, std::fabs(split - exact) / magnitude);
    worst.plain = std::max(worst.plain, std::fabs(plain - exact) / magnitude);
  }
  return worst;
}

// The dropped small x small product and the TF32 reading of the small parts
// leave less than 3 x 2^-22 of the magnitude, whichever rounding the tensor
// cores apply; a plain TF32 product misses by 2^-16 or more (the test would
// catch a split that left the operands unsplit).
TEST(SplitTf32, ThreeProductsKeepFp32AccuracyUnderEitherReading) {
  for (const auto& read : {std::function<float(float)>(read_truncated), std::function<float(float)>(read_rounded)}) {
    const DotErrors e = dot_errors(read, 256, 200);
    EXPECT_LT(e.split, 3 * 0x1p-22);
    EXPECT_GT(e.plain, 0x1p-16) << "split " << e.split;
  }
}

// C = alpha op(A) op(B) + beta C over a batch whose matrices lie apart (strides
// past their sizes, as chunked attention's head rows do), against float64
// loops: fp32 accumulation error, as the unsplit product.
void check_split_batch(char ta, char tb, index_t m, index_t n, index_t k, float beta, unsigned seed) {
  const index_t count = 3, a_rows = ta == 'N' ? m : k, a_cols = ta == 'N' ? k : m;
  const index_t b_rows = tb == 'N' ? k : n, b_cols = tb == 'N' ? n : k;
  const index_t a_stride = a_rows * a_cols + 5, b_stride = b_rows * b_cols + 3;
  Random rng(seed);
  const HostVec a = quantize<float>(rng.uniform(count * a_stride, -1, 1));
  const HostVec b = quantize<float>(rng.uniform(count * b_stride, -1, 1));
  const HostVec c0 = quantize<float>(rng.uniform(count * m * n, -1, 1));
  const View1<float> av = to_view1<float>("a", a), bv = to_view1<float>("b", b), cv = to_view1<float>("c", c0);
  const View1<float> scratch("split", kernels::split_operand_elements(count * m * k, count * k * n));
  kernels::batched_gemm<float, float>(ta, tb, 1.5f, {av.data(), a_rows, a_cols, a_stride},
                                      {bv.data(), b_rows, b_cols, b_stride}, beta, {cv.data(), m, n, m * n}, count,
                                      {scratch.data(), index_t(scratch.extent(0))});
  const HostVec got = to_host(cv);
  for (index_t e = 0; e < count; ++e)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (index_t p = 0; p < k; ++p) {
          const double x = a[e * a_stride + (ta == 'N' ? i * a_cols + p : p * a_cols + i)];
          const double y = b[e * b_stride + (tb == 'N' ? p * b_cols + j : j * b_cols + p)];
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const double c = c0[(e * m + i) * n + j];
        const double want = 1.5 * sum + beta * c;
        const double bound = (4.0 * double(k) + 8.0) * 0x1p-24 * (1.5 * magnitude + std::fabs(beta * c));
        ASSERT_LE(std::fabs(got[(e * m + i) * n + j] - want), bound) << ta << tb << " matrix " << e << " (" << i
                                                                     << ", " << j << ")";
      }
}

TEST(SplitTf32, BatchedGemmSplitPathMatchesFloat64) {
  unsigned seed = 21;
  for (const auto& [ta, tb] : {std::make_pair('N', 'T'), std::make_pair('N', 'N'), std::make_pair('T', 'N')})
    for (const float beta : {0.0f, 1.0f}) {
      check_split_batch(ta, tb, 9, 7, 64, beta, seed++);
      check_split_batch(ta, tb, 40, 33, 70, beta, seed++);
    }
}

TEST(SplitTf32, BatchedGemmRefusesATooSmallScratch) {
  const View1<float> a("a", 4 * 4), b("b", 4 * 4), c("c", 4 * 4), scratch("split", 10);
  const kernels::MatrixBatch<const float> a4{a.data(), 4, 4, 16}, b4{b.data(), 4, 4, 16};
  const kernels::MatrixBatch<float> c4{c.data(), 4, 4, 16};
  const kernels::SplitScratch too_small{scratch.data(), 10};
  EXPECT_THROW((kernels::batched_gemm<float, float>('N', 'N', 1.0f, a4, b4, 0.0f, c4, 1, too_small)),
               std::invalid_argument);
}

}  // namespace
}  // namespace miniattn::ktest
