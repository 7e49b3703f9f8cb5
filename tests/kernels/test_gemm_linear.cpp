// gemm and the linear layer against naive float64 host loops, and the linear
// backward against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernel_test_util.hpp"
#include "kernels/base/gemm.hpp"
#include "kernels/layers/linear.hpp"

namespace miniattn::ktest {
namespace {

// C = alpha op(A) op(B) + beta C, plain loops. A is stored [a0, a1], B [b0, b1].
HostVec reference_gemm(char ta, char tb, double alpha, const HostVec& a, index_t a1, const HostVec& b, index_t b1,
                       double beta, const HostVec& c, index_t m, index_t n, index_t k) {
  HostVec out(m * n);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (index_t p = 0; p < k; ++p) {
        const double av = (ta == 'N') ? a[i * a1 + p] : a[p * a1 + i];
        const double bv = (tb == 'N') ? b[p * b1 + j] : b[j * b1 + p];
        s += av * bv;
      }
      out[i * n + j] = alpha * s + beta * c[i * n + j];
    }
  return out;
}

// y = x W^T + b.
HostVec reference_linear(const HostVec& x, const HostVec& w, const HostVec& b, index_t rows, index_t in, index_t out) {
  HostVec y(rows * out);
  for (index_t r = 0; r < rows; ++r)
    for (index_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (index_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

template <class T>
class GemmTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, Precisions);

template <class T>
void check_gemm(char ta, char tb, index_t m, index_t n, index_t k, unsigned seed) {
  Random rng(seed);
  const index_t a0 = (ta == 'N' || ta == 'n') ? m : k, a1 = (ta == 'N' || ta == 'n') ? k : m;
  const index_t b0 = (tb == 'N' || tb == 'n') ? k : n, b1 = (tb == 'N' || tb == 'n') ? n : k;
  const HostVec a = quantize<T>(rng.uniform(a0 * a1, -1, 1));
  const HostVec b = quantize<T>(rng.uniform(b0 * b1, -1, 1));
  const HostVec c = quantize<T>(rng.uniform(m * n, -1, 1));
  const double alpha = static_cast<T>(1.25), beta = static_cast<T>(-0.75);
  auto av = to_view2<T>("a", a, a0, a1);
  auto bv = to_view2<T>("b", b, b0, b1);
  auto cv = to_view2<T>("c", c, m, n);
  kernels::gemm<T>(ta, tb, static_cast<T>(alpha), av, bv, static_cast<T>(beta), cv);
  const char ua = (ta == 'n') ? 'N' : (ta == 't') ? 'T' : ta;
  const char ub = (tb == 'n') ? 'N' : (tb == 't') ? 'T' : tb;
  const HostVec want = reference_gemm(ua, ub, alpha, a, a1, b, b1, beta, c, m, n, k);
  SCOPED_TRACE(std::string("trans ") + ta + tb);
  MINIATTN_EXPECT_CLOSE(to_host(cv), want, Tolerance<T>::forward);
}

TYPED_TEST(GemmTest, AllTransposeCombinationsNonSquare) {
  using T = TypeParam;
  const char trans[] = {'N', 'T'};
  unsigned seed = 11;
  for (char ta : trans)
    for (char tb : trans) {
      check_gemm<T>(ta, tb, 7, 5, 9, seed++);
      check_gemm<T>(ta, tb, 67, 45, 130, seed++);  // past the BLAS block sizes' small-matrix paths
    }
}

// bf16 operands, C in bf16 or fp32, products accumulated in fp32 (on the host
// in blocks of 256 rows widened to fp32: sizes past a block, and of the inner
// dimension for A^T). Against float64 loops on the same bf16 inputs: C in fp32
// within fp32 accumulation error; C in bf16 within one rounding of the result
// (2^-8 relative: bf16 keeps 8 significant bits) plus that error.
template <class C>
void check_bf16_gemm(char ta, char tb, index_t m, index_t n, index_t k, unsigned seed) {
  Random rng(seed);
  const index_t a0 = ta == 'N' ? m : k, a1 = ta == 'N' ? k : m, b0 = tb == 'N' ? k : n, b1 = tb == 'N' ? n : k;
  const HostVec a = quantize<bf16>(rng.uniform(a0 * a1, -1, 1)), b = quantize<bf16>(rng.uniform(b0 * b1, -1, 1));
  const HostVec c = quantize<C>(rng.uniform(m * n, -1, 1));
  const double alpha = 1.25, beta = -0.75;
  auto cv = to_view2<C>("c", c, m, n);
  kernels::gemm<bf16, C>(ta, tb, float(alpha), to_view2<bf16>("a", a, a0, a1), to_view2<bf16>("b", b, b0, b1),
                         float(beta), cv);
  const HostVec want = reference_gemm(ta, tb, alpha, a, a1, b, b1, beta, c, m, n, k), got = to_host(cv);
  const double accumulation = 4.0 * static_cast<double>(k) * 0x1p-24;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double rounding = std::is_same<C, bf16>::value ? 0x1p-8 * std::fabs(want[i]) : 0.0;
    ASSERT_LE(std::fabs(got[i] - want[i]), rounding + accumulation) << ta << tb << " element " << i;
  }
}

TEST(GemmBf16, EveryTransposeItTakesBothOutputs) {
  unsigned seed = 101;
  for (const auto& [ta, tb] : {std::make_pair('N', 'N'), std::make_pair('N', 'T'), std::make_pair('T', 'N')})
    for (const auto& [m, n, k] : {std::make_tuple(7, 5, 9), std::make_tuple(300, 33, 70), std::make_tuple(20, 40, 600)}) {
      check_bf16_gemm<bf16>(ta, tb, m, n, k, seed++);
      check_bf16_gemm<float>(ta, tb, m, n, k, seed++);
    }
}

TYPED_TEST(GemmTest, LowerCaseTransposeCharacters) {
  check_gemm<TypeParam>('t', 'n', 6, 4, 3, 5);
  check_gemm<TypeParam>('n', 't', 3, 8, 5, 6);
}

TYPED_TEST(GemmTest, BetaZeroOverwritesWithoutReadingC) {
  using T = TypeParam;
  Random rng(3);
  const HostVec a = quantize<T>(rng.uniform(5 * 4, -1, 1)), b = quantize<T>(rng.uniform(4 * 6, -1, 1));
  auto av = to_view2<T>("a", a, 5, 4);
  auto bv = to_view2<T>("b", b, 4, 6);
  View2<T> cv("c", 5, 6);
  fill_nan(cv);
  kernels::gemm<T>('N', 'N', T(1), av, bv, T(0), cv);
  MINIATTN_EXPECT_CLOSE(to_host(cv), reference_gemm('N', 'N', 1, a, 4, b, 6, 0, HostVec(30, 0.0), 5, 6, 4),
                        Tolerance<T>::forward);
}

TYPED_TEST(GemmTest, EmptyInnerDimensionScalesC) {
  using T = TypeParam;
  View2<T> a("a", 3, 0), b("b", 0, 4);
  const HostVec c = quantize<T>(Random(4).uniform(12, -1, 1));
  auto cv = to_view2<T>("c", c, 3, 4);
  kernels::gemm<T>('N', 'N', T(2), a, b, T(0.5), cv);
  HostVec want = c;
  for (auto& x : want) x *= 0.5;
  MINIATTN_EXPECT_CLOSE(to_host(cv), want, Tolerance<T>::forward);
  fill_nan(cv);
  kernels::gemm<T>('N', 'N', T(2), a, b, T(0), cv);
  EXPECT_EQ(to_host(cv), HostVec(12, 0.0));
}

TYPED_TEST(GemmTest, RowRangeSubviews) {
  // Row blocks of a LayoutRight matrix are still contiguous LayoutRight views.
  using T = TypeParam;
  Random rng(8);
  const HostVec a = quantize<T>(rng.uniform(10 * 6, -1, 1)), b = quantize<T>(rng.uniform(5 * 6, -1, 1));
  auto av = to_view2<T>("a", a, 10, 6);
  auto bv = to_view2<T>("b", b, 5, 6);
  View2<T> cv("c", 10, 5);
  View2<const T> a_rows = Kokkos::subview(av, std::make_pair(index_t(3), index_t(9)), Kokkos::ALL());
  View2<T> c_rows = Kokkos::subview(cv, std::make_pair(index_t(3), index_t(9)), Kokkos::ALL());
  kernels::gemm<T>('N', 'T', T(1), a_rows, bv, T(0), c_rows);
  const HostVec a_sub(a.begin() + 3 * 6, a.begin() + 9 * 6);
  HostVec want(10 * 5, 0.0);
  const HostVec block = reference_gemm('N', 'T', 1, a_sub, 6, b, 6, 0, HostVec(30, 0.0), 6, 5, 6);
  std::copy(block.begin(), block.end(), want.begin() + 3 * 5);
  MINIATTN_EXPECT_CLOSE(to_host(cv), want, Tolerance<T>::forward);
}

TEST(Gemm, RejectsBadTransposeAndShapes) {
  View2<double> a("a", 3, 4), b("b", 4, 5), c("c", 3, 5);
  EXPECT_THROW(kernels::gemm<double>('C', 'N', 1.0, a, b, 0.0, c), std::invalid_argument);
  EXPECT_THROW(kernels::gemm<double>('N', 'x', 1.0, a, b, 0.0, c), std::invalid_argument);
  EXPECT_THROW(kernels::gemm<double>('T', 'N', 1.0, a, b, 0.0, c), std::invalid_argument);  // inner 3 vs 4
  View2<double> c_bad("c_bad", 3, 4);
  EXPECT_THROW(kernels::gemm<double>('N', 'N', 1.0, a, b, 0.0, c_bad), std::invalid_argument);
  EXPECT_NO_THROW(kernels::gemm<double>('N', 'N', 1.0, a, b, 0.0, c));
}

// ---------------------------------------------------------------- linear

template <class T>
class LinearTest : public ::testing::Test {};
TYPED_TEST_SUITE(LinearTest, Precisions);

TYPED_TEST(LinearTest, ForwardMatchesReference) {
  using T = TypeParam;
  const index_t rows = 13, in = 7, out = 10;
  Random rng(21);
  const HostVec x = quantize<T>(rng.uniform(rows * in, -1, 1));
  const HostVec w = quantize<T>(rng.uniform(out * in, -1, 1));
  const HostVec b = quantize<T>(rng.uniform(out, -1, 1));
  auto xv = to_view2<T>("x", x, rows, in);
  auto wv = to_view2<T>("w", w, out, in);
  auto bv = to_view1<T>("b", b);
  View2<T> yv("y", rows, out);
  fill_nan(yv);
  kernels::linear_forward<T>(xv, wv, bv, yv);
  MINIATTN_EXPECT_CLOSE(to_host(yv), reference_linear(x, w, b, rows, in, out), Tolerance<T>::forward);

  // No bias: b of extent 0.
  fill_nan(yv);
  kernels::linear_forward<T>(xv, wv, View1<T>("no_bias", 0), yv);
  MINIATTN_EXPECT_CLOSE(to_host(yv), reference_linear(x, w, HostVec(), rows, in, out), Tolerance<T>::forward);
}

TEST(Linear, ForwardRejectsMismatchedShapes) {
  View2<double> x("x", 4, 3), w("w", 5, 3), y("y", 4, 5), w_bad("w_bad", 5, 2);
  View1<double> b_bad("b_bad", 4);
  EXPECT_THROW(kernels::linear_forward<double>(x, w_bad, View1<double>("b", 5), y), std::invalid_argument);
  EXPECT_THROW(kernels::linear_forward<double>(x, w, b_bad, y), std::invalid_argument);
}

// All linear gradients against central differences of L = sum(y * G), with
// dw and db pre-filled (they accumulate) and dx pre-filled with NaN (overwritten).
TEST(Linear, BackwardMatchesFiniteDifferences) {
  const index_t rows = 11, in = 6, out = 9;
  Random rng(31);
  auto x = to_view2<double>("x", rng.uniform(rows * in, -1, 1), rows, in);
  auto w = to_view2<double>("w", rng.uniform(out * in, -1, 1), out, in);
  auto b = to_view1<double>("b", rng.uniform(out, -1, 1));
  const HostVec g = rng.uniform(rows * out, -1, 1);
  View2<double> y("y", rows, out);
  auto loss = [&]() {
    kernels::linear_forward<double>(x, w, b, y);
    return weighted_sum(y, g);
  };

  const HostVec dw0 = rng.uniform(out * in, -1, 1), db0 = rng.uniform(out, -1, 1);
  auto dy = to_view2<double>("dy", g, rows, out);
  View2<double> dx("dx", rows, in);
  fill_nan(dx);
  auto dw = to_view2<double>("dw", dw0, out, in);
  auto db = to_view1<double>("db", db0);
  kernels::linear_backward<double>(dy, x, w, dx, dw, db, column_partials<double>(rows, out));

  MINIATTN_EXPECT_CLOSE(to_host(dx), fd_gradient(x, loss), kFdTolerance);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dw), dw0), fd_gradient(w, loss), kFdTolerance);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(db), db0), fd_gradient(b, loss), kFdTolerance);

  // A second call adds the same dw, db again (accumulation, not overwrite).
  const HostVec dw1 = to_host(dw), db1 = to_host(db);
  kernels::linear_backward<double>(dy, x, w, dx, dw, db, column_partials<double>(rows, out));
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dw), dw1), subtract(dw1, dw0), 1e-12);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(db), db1), subtract(db1, db0), 1e-12);
}

// dx of extent 0 (first layer) and db of extent 0 (no bias) are skipped.
TEST(Linear, BackwardSkipsEmptyDxAndDb) {
  const index_t rows = 5, in = 4, out = 3;
  Random rng(41);
  const HostVec xh = rng.uniform(rows * in, -1, 1), wh = rng.uniform(out * in, -1, 1),
                gh = rng.uniform(rows * out, -1, 1);
  auto x = to_view2<double>("x", xh, rows, in);
  auto w = to_view2<double>("w", wh, out, in);
  auto dy = to_view2<double>("dy", gh, rows, out);
  View2<double> dw("dw", out, in);
  kernels::linear_backward<double>(dy, x, w, View2<double>("dx", 0, in), dw, View1<double>("db", 0),
                                   column_partials<double>(rows, out));
  // dw = dy^T x
  MINIATTN_EXPECT_CLOSE(to_host(dw), reference_gemm('T', 'N', 1, gh, out, xh, in, 0, HostVec(out * in, 0.0), out, in, rows),
                        1e-12);
}

// db over many rows: the column sums run in chunks of kColumnSumChunkRows rows
// (here 3 whole chunks and a partial one) and must still equal the plain sum.
TYPED_TEST(LinearTest, BiasGradientOverManyRowChunks) {
  using T = TypeParam;
  const index_t rows = 3 * kernels::kColumnSumChunkRows + 17, in = 3, out = 21;
  Random rng(61);
  const HostVec g = quantize<T>(rng.uniform(rows * out, -1, 1)), db0 = quantize<T>(rng.uniform(out, -1, 1));
  HostVec want = db0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t o = 0; o < out; ++o) want[o] += g[r * out + o];
  auto db = to_view1<T>("db", db0);
  View2<T> dw("dw", out, in);
  kernels::linear_backward<T>(to_view2<T>("dy", g, rows, out), View2<T>("x", rows, in), View2<T>("w", out, in),
                              View2<T>("dx", 0, in), dw, db, column_partials<T>(rows, out));
  MINIATTN_EXPECT_CLOSE(to_host(db), want, Tolerance<T>::forward);
}

// The float instantiation agrees with the (finite-difference-checked) double one.
TEST(Linear, FloatBackwardMatchesDouble) {
  const index_t rows = 12, in = 8, out = 5;
  Random rng(51);
  const HostVec x = quantize<float>(rng.uniform(rows * in, -1, 1)), w = quantize<float>(rng.uniform(out * in, -1, 1)),
                g = quantize<float>(rng.uniform(rows * out, -1, 1)), dw0 = quantize<float>(rng.uniform(out * in, -1, 1)),
                db0 = quantize<float>(rng.uniform(out, -1, 1));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    View2<T> dx("dx", rows, in);
    auto dw = to_view2<T>("dw", dw0, out, in);
    auto db = to_view1<T>("db", db0);
    kernels::linear_backward<T>(to_view2<T>("dy", g, rows, out), to_view2<T>("x", x, rows, in),
                                to_view2<T>("w", w, out, in), dx, dw, db, column_partials<T>(rows, out));
    return std::make_tuple(to_host(dx), to_host(dw), to_host(db));
  };
  const auto [dxf, dwf, dbf] = run(0.0f);
  const auto [dxd, dwd, dbd] = run(0.0);
  MINIATTN_EXPECT_CLOSE(dxf, dxd, Tolerance<float>::forward);
  MINIATTN_EXPECT_CLOSE(subtract(dwf, dw0), subtract(dwd, dw0), Tolerance<float>::forward);
  MINIATTN_EXPECT_CLOSE(subtract(dbf, db0), subtract(dbd, db0), Tolerance<float>::forward);
}

}  // namespace
}  // namespace miniattn::ktest
