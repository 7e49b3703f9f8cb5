// LayerNorm and GELU against naive float64 host loops; their backward passes
// against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "kernel_test_util.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/layer_norm.hpp"

namespace miniattn::ktest {
namespace {

template <class T>
class LayerNormTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LayerNormTest, Precisions);

struct LayerNormReference {
  HostVec y, mean, rstd;
};

LayerNormReference reference_layer_norm(const HostVec& x, const HostVec& gamma, const HostVec& beta, index_t rows,
                                        index_t d) {
  LayerNormReference ref{HostVec(rows * d), HostVec(rows), HostVec(rows)};
  for (index_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (index_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= static_cast<double>(d);
    double var = 0.0;
    for (index_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    var /= static_cast<double>(d);  // biased, as PyTorch
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (index_t j = 0; j < d; ++j) ref.y[r * d + j] = (x[r * d + j] - mean) * rstd * gamma[j] + beta[j];
    ref.mean[r] = mean;
    ref.rstd[r] = rstd;
  }
  return ref;
}

TYPED_TEST(LayerNormTest, ForwardMatchesReference) {
  using T = TypeParam;
  const index_t rows = 11, d = 37;
  Random rng(101);
  HostVec x = rng.uniform(rows * d, -2, 2);
  // Rows with different offsets and spreads; one with a tiny spread, where eps matters.
  for (index_t r = 0; r < rows; ++r)
    for (index_t j = 0; j < d; ++j) x[r * d + j] = 0.5 * r - 2.0 + (r == 4 ? 1e-3 : 0.3 * (r + 1)) * x[r * d + j];
  x = quantize<T>(x);
  const HostVec gamma = quantize<T>(rng.uniform(d, 0.5, 1.5)), beta = quantize<T>(rng.uniform(d, -0.5, 0.5));
  auto xv = to_view2<T>("x", x, rows, d);
  View2<T> y("y", rows, d);
  View1<T> mean("mean", rows), rstd("rstd", rows);
  fill_nan(y);
  kernels::layer_norm_forward<T>(xv, to_view1<T>("gamma", gamma), to_view1<T>("beta", beta), y, mean, rstd);
  const auto ref = reference_layer_norm(x, gamma, beta, rows, d);
  MINIATTN_EXPECT_CLOSE(to_host(y), ref.y, Tolerance<T>::forward);
  MINIATTN_EXPECT_CLOSE(to_host(mean), ref.mean, Tolerance<T>::forward);
  MINIATTN_EXPECT_CLOSE(to_host(rstd), ref.rstd, Tolerance<T>::forward);
}

TEST(LayerNorm, RejectsMismatchedShapes) {
  View2<double> x("x", 3, 4), y("y", 3, 4);
  View1<double> g("g", 4), b("b", 4), g_bad("g_bad", 5), mean("mean", 3), rstd("rstd", 3);
  EXPECT_THROW(kernels::layer_norm_forward<double>(x, g_bad, b, y, mean, rstd), std::invalid_argument);
  EXPECT_THROW(kernels::layer_norm_forward<double>(x, g, b, y, View1<double>("m", 2), rstd), std::invalid_argument);
}

// L = sum(y * G). dx, dgamma, dbeta are pre-filled: the kernel accumulates.
TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const index_t rows = 9, d = 13;
  Random rng(111);
  auto x = to_view2<double>("x", rng.uniform(rows * d, -2, 2), rows, d);
  auto gamma = to_view1<double>("gamma", rng.uniform(d, 0.5, 1.5));
  auto beta = to_view1<double>("beta", rng.uniform(d, -0.5, 0.5));
  const HostVec g = rng.uniform(rows * d, -1, 1);
  View2<double> y("y", rows, d);
  View1<double> mean("mean", rows), rstd("rstd", rows);
  auto loss = [&]() {
    kernels::layer_norm_forward<double>(x, gamma, beta, y, mean, rstd);
    return weighted_sum(y, g);
  };
  loss();  // mean, rstd of the unperturbed input for the backward pass

  const HostVec dx0 = rng.uniform(rows * d, -1, 1), dgamma0 = rng.uniform(d, -1, 1), dbeta0 = rng.uniform(d, -1, 1);
  auto dx = to_view2<double>("dx", dx0, rows, d);
  auto dgamma = to_view1<double>("dgamma", dgamma0);
  auto dbeta = to_view1<double>("dbeta", dbeta0);
  kernels::layer_norm_backward<double>(to_view2<double>("dy", g, rows, d), x, gamma, mean, rstd, dx, dgamma, dbeta,
                                       column_partials<double>(rows, d));

  MINIATTN_EXPECT_CLOSE(subtract(to_host(dx), dx0), fd_gradient(x, loss), kFdTolerance);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dgamma), dgamma0), fd_gradient(gamma, loss), kFdTolerance);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dbeta), dbeta0), fd_gradient(beta, loss), kFdTolerance);
}

// dgamma and dbeta over rows that span several column-sum chunks (and a
// partial one) against their definitions, summed in double on the host.
TYPED_TEST(LayerNormTest, ParameterGradientsOverManyRowChunks) {
  using T = TypeParam;
  const index_t rows = 2 * kernels::kColumnSumChunkRows + 9, d = 19;
  Random rng(131);
  const HostVec x = quantize<T>(rng.uniform(rows * d, -2, 2)), gamma = quantize<T>(rng.uniform(d, 0.5, 1.5)),
                g = quantize<T>(rng.uniform(rows * d, -1, 1));
  const auto ref = reference_layer_norm(x, gamma, HostVec(d, 0.0), rows, d);
  HostVec want_dgamma(d, 0.0), want_dbeta(d, 0.0);
  for (index_t r = 0; r < rows; ++r)
    for (index_t j = 0; j < d; ++j) {
      want_dgamma[j] += g[r * d + j] * (x[r * d + j] - ref.mean[r]) * ref.rstd[r];
      want_dbeta[j] += g[r * d + j];
    }
  auto xv = to_view2<T>("x", x, rows, d);
  auto gv = to_view1<T>("gamma", gamma);
  View2<T> y("y", rows, d), dx("dx", rows, d);
  View1<T> mean("mean", rows), rstd("rstd", rows), dgamma("dgamma", d), dbeta("dbeta", d);
  kernels::layer_norm_forward<T>(xv, gv, View1<T>("beta", d), y, mean, rstd);
  kernels::layer_norm_backward<T>(to_view2<T>("dy", g, rows, d), xv, gv, mean, rstd, dx, dgamma, dbeta,
                                  column_partials<T>(rows, d));
  MINIATTN_EXPECT_CLOSE(to_host(dgamma), want_dgamma, Tolerance<T>::forward);
  MINIATTN_EXPECT_CLOSE(to_host(dbeta), want_dbeta, Tolerance<T>::forward);
}

TEST(LayerNorm, FloatBackwardMatchesDouble) {
  const index_t rows = 7, d = 29;
  Random rng(121);
  const HostVec x = quantize<float>(rng.uniform(rows * d, -2, 2)), gamma = quantize<float>(rng.uniform(d, 0.5, 1.5)),
                beta = quantize<float>(rng.uniform(d, -0.5, 0.5)), g = quantize<float>(rng.uniform(rows * d, -1, 1));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    auto xv = to_view2<T>("x", x, rows, d);
    auto gv = to_view1<T>("gamma", gamma);
    View2<T> y("y", rows, d), dx("dx", rows, d);
    View1<T> mean("mean", rows), rstd("rstd", rows), dgamma("dgamma", d), dbeta("dbeta", d);
    kernels::layer_norm_forward<T>(xv, gv, to_view1<T>("beta", beta), y, mean, rstd);
    kernels::layer_norm_backward<T>(to_view2<T>("dy", g, rows, d), xv, gv, mean, rstd, dx, dgamma, dbeta,
                                    column_partials<T>(rows, d));
    return std::make_tuple(to_host(dx), to_host(dgamma), to_host(dbeta));
  };
  const auto [dxf, dgf, dbf] = run(0.0f);
  const auto [dxd, dgd, dbd] = run(0.0);
  MINIATTN_EXPECT_CLOSE(dxf, dxd, Tolerance<float>::forward);
  MINIATTN_EXPECT_CLOSE(dgf, dgd, Tolerance<float>::forward);
  MINIATTN_EXPECT_CLOSE(dbf, dbd, Tolerance<float>::forward);
}

// ------------------------------------------------------------------ gelu

double reference_gelu(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

template <class T>
class GeluTest : public ::testing::Test {};
TYPED_TEST_SUITE(GeluTest, Precisions);

TYPED_TEST(GeluTest, ForwardMatchesReference) {
  using T = TypeParam;
  const index_t rows = 9, cols = 23;
  const HostVec x = quantize<T>(Random(201).uniform(rows * cols, -6, 6));
  View2<T> y("y", rows, cols);
  fill_nan(y);
  kernels::gelu_forward<T>(to_view2<T>("x", x, rows, cols), y);
  HostVec want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = reference_gelu(x[i]);
  MINIATTN_EXPECT_CLOSE(to_host(y), want, Tolerance<T>::forward);
}

// Values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) worked out
// separately (Python, math.tanh): the tanh approximation, not the erf GELU
// (which differs by ~1e-4, e.g. 0.8413447 at x = 1).
TEST(Gelu, TanhApproximationValues) {
  const HostVec x = {-3.0, -1.0, -0.5, 0.5, 1.0, 2.0};
  const HostVec want = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606,
                        0.34571400982514394,    0.8411919906082768,   1.954597694087775};
  View2<double> y("y", 1, 6);
  kernels::gelu_forward<double>(to_view2<double>("x", x, 1, 6), y);
  MINIATTN_EXPECT_CLOSE(to_host(y), want, 1e-14);
}

// Far in the negative tail gelu(x) is tiny while 1 + tanh(u) cancels (at
// x = -5.9 the tanh form keeps only about 5 of double's 16 digits). Each value
// must be right relative to itself up to what rounding u costs: exp(-2u)
// multiplies u's relative rounding error by |2u|.
TYPED_TEST(GeluTest, NegativeTailIsRelativelyAccurate) {
  using T = TypeParam;
  const index_t cols = 40;
  HostVec x(cols);
  for (index_t j = 0; j < cols; ++j) x[j] = -2.0 - 0.1 * static_cast<double>(j);  // down to -5.9
  x = quantize<T>(x);
  View2<T> y("y", 1, cols);
  kernels::gelu_forward<T>(to_view2<T>("x", x, 1, cols), y);
  const HostVec got = to_host(y);
  const double pi = 3.14159265358979323846;
  for (index_t j = 0; j < cols; ++j) {
    // x sigmoid(2u) in long double: no cancellation in the reference either.
    const long double u = std::sqrt(2.0L / pi) * (x[j] + 0.044715L * x[j] * x[j] * x[j]);
    const double want = static_cast<double>(x[j] / (1.0L + std::exp(-2.0L * u)));
    const double allowed = (8.0 + 4.0 * std::fabs(2.0 * static_cast<double>(u))) * std::numeric_limits<T>::epsilon();
    EXPECT_LE(std::fabs(got[j] - want), allowed * std::fabs(want))
        << "x = " << x[j] << ": " << got[j] << " vs " << want;
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const index_t rows = 7, cols = 11;
  Random rng(211);
  auto x = to_view2<double>("x", rng.uniform(rows * cols, -4, 4), rows, cols);
  const HostVec g = rng.uniform(rows * cols, -1, 1);
  View2<double> y("y", rows, cols);
  auto loss = [&]() {
    kernels::gelu_forward<double>(x, y);
    return weighted_sum(y, g);
  };
  View2<double> dx("dx", rows, cols);
  fill_nan(dx);
  kernels::gelu_backward<double>(x, to_view2<double>("dy", g, rows, cols), dx);
  MINIATTN_EXPECT_CLOSE(to_host(dx), fd_gradient(x, loss), kFdTolerance);

  // dx may alias dy.
  auto inplace = to_view2<double>("dy_dx", g, rows, cols);
  kernels::gelu_backward<double>(x, inplace, inplace);
  EXPECT_EQ(to_host(inplace), to_host(dx));
}

TEST(Gelu, FloatBackwardMatchesDouble) {
  const index_t rows = 5, cols = 17;
  Random rng(221);
  const HostVec x = quantize<float>(rng.uniform(rows * cols, -5, 5)), g = quantize<float>(rng.uniform(rows * cols, -1, 1));
  View2<float> dxf("dxf", rows, cols);
  View2<double> dxd("dxd", rows, cols);
  kernels::gelu_backward<float>(to_view2<float>("x", x, rows, cols), to_view2<float>("dy", g, rows, cols), dxf);
  kernels::gelu_backward<double>(to_view2<double>("x", x, rows, cols), to_view2<double>("dy", g, rows, cols), dxd);
  MINIATTN_EXPECT_CLOSE(to_host(dxf), to_host(dxd), Tolerance<float>::forward);
}

}  // namespace
}  // namespace miniattn::ktest
