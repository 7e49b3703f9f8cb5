// simd::pack_exp, the exponential every host kernel's softmax and loss use,
// against long double expl lane by lane: within 1.5 units in the last place
// over the range the kernels call it on (measured: under 1 with FMA, 1.2 in the
// sanitizer build's code without it; a polynomial one degree short is off by
// 2.3 in double, 2.7 in float), 0 below the smallest normal result, exactly 1
// at 0, and a NaN kept as NaN (the step's NaN check must still see it). Also
// the bf16 kernels' exp (ExpForBf16, a shorter polynomial for values rounded
// to bf16 next): within its own bound of 4 ulps of float, the same special values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/base/simd_pack.hpp"

namespace miniattn::ktest {
namespace {

using kernels::simd::ExpConstants;
using kernels::simd::ExpForBf16;
using kernels::simd::Pack;
using kernels::simd::pack_exp;
using kernels::simd::pack_lane;
using kernels::simd::pack_load;

// pack_exp of each value, packed lanes at a time (a short tail repeats the last value).
template <class T, class C = ExpConstants<T>>
std::vector<T> pack_exp_of(const std::vector<T>& x) {
  using V = typename Pack<T>::type;
  constexpr int lanes = Pack<T>::lanes;
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); i += lanes) {
    T in[lanes];
    for (int l = 0; l < lanes; ++l) in[l] = x[std::min(i + l, x.size() - 1)];
    const V out = pack_exp<T, C>(pack_load<V>(in));
    for (int l = 0; l < lanes && i + l < x.size(); ++l) y[i + l] = pack_lane(out, l);
  }
  return y;
}

// |y - exp(x)| in units of the last place of exp(x) in T.
template <class T>
long double ulps_off(T x, T y) {
  const long double exact = std::exp(static_cast<long double>(x));
  const long double ulp = std::ldexp(1.0L, std::ilogb(exact) - std::numeric_limits<T>::digits + 1);
  return std::fabs(static_cast<long double>(y) - exact) / ulp;
}

template <class T, class C = ExpConstants<T>>
void expect_within_ulps(const char* type, long double bound) {
  SCOPED_TRACE(type);
  // From just above log(smallest normal) (at it, the result rounds below the
  // smallest normal) to 10: the kernels pass x <= 0 up to rounding.
  const T lowest = std::nextafter(ExpConstants<T>::lowest, T(0));
  const int samples = 1 << 20;
  std::vector<T> x(samples);
  for (int i = 0; i < samples; ++i) x[i] = lowest + (T(10) - lowest) * T(i) / T(samples - 1);
  x.push_back(T(-1e-30));
  x.push_back(std::nextafter(T(0), T(-1)));
  const std::vector<T> y = pack_exp_of<T, C>(x);
  long double worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double off = ulps_off(x[i], y[i]);
    if (off > worst) worst = off, worst_at = i;
  }
  EXPECT_LE(worst, bound) << "at x = " << x[worst_at] << ": " << y[worst_at];
}

TEST(PackExp, WithinOneAndAHalfUlpsOverTheKernelsRange) {
  expect_within_ulps<float>("float", 1.5L);
  expect_within_ulps<double>("double", 1.5L);
}

// Measured: 2.0 ulps; a degree-4 minimax polynomial is off by 43.
TEST(PackExp, Bf16OperandsWithinFourUlpsOverTheKernelsRange) { expect_within_ulps<float, ExpForBf16>("bf16", 4.0L); }

template <class T, class C = ExpConstants<T>>
void expect_special_values(const char* type) {
  SCOPED_TRACE(type);
  constexpr T inf = std::numeric_limits<T>::infinity();
  const T lowest = ExpConstants<T>::lowest;
  const std::vector<T> x = {-inf, T(-1e6), std::nextafter(lowest, -inf), T(0), T(-0.0),
                            std::numeric_limits<T>::quiet_NaN()};
  const std::vector<T> y = pack_exp_of<T, C>(x);
  EXPECT_EQ(y[0], T(0)) << "exp(-inf)";  // a masked score
  EXPECT_EQ(y[1], T(0)) << "exp(-1e6)";
  EXPECT_EQ(y[2], T(0)) << "below the smallest normal result";
  EXPECT_EQ(y[3], T(1)) << "exp(0)";  // a row's maximum: its weight exactly 1
  EXPECT_EQ(y[4], T(1)) << "exp(-0)";
  EXPECT_TRUE(std::isnan(y[5])) << "exp(NaN) = " << y[5];
}

TEST(PackExp, SpecialValues) {
  expect_special_values<float>("float");
  expect_special_values<double>("double");
  expect_special_values<float, ExpForBf16>("bf16");
}

}  // namespace
}  // namespace miniattn::ktest
