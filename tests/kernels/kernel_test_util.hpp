#pragma once
// Helpers shared by the kernel tests: random host data, copies to and from
// device views, norm-wise relative errors and central finite differences.
//
// Conventions:
//  * host data is std::vector<double> in row-major order (the views are
//    LayoutRight, so flat index = row-major index);
//  * for T = float the random inputs are rounded to float BEFORE the float64
//    reference sees them, so the reference computes exactly on what the kernel
//    gets and the only difference is the kernel's own rounding;
//  * errors are norm-wise: max|got - want| / max|want|.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "kernels/base/reduction.hpp"

namespace miniattn::ktest {

using HostVec = std::vector<double>;

// Forward tolerances (norm-wise relative error against the float64 reference).
template <class T>
struct Tolerance;
template <>
struct Tolerance<double> {
  static constexpr double forward = 1e-12;
};
template <>
struct Tolerance<float> {
  // float has 2^-24 ~ 6e-8 unit roundoff; the small reductions here
  // (<= ~150 terms) stay below ~1e-6; a wrong formula is off by >= 1e-3.
  static constexpr double forward = 1e-5;
};

// Finite differences (float64 only). Central differences have truncation
// error ~ h^2 f''' / 6 and rounding error ~ eps |L| / h; with h = 1e-6,
// |L| = O(10) and eps = 2.2e-16 both are <= ~1e-9, three orders of magnitude
// under the 1e-6 tolerance, while any wrong term in a gradient gives O(1e-2).
constexpr double kFdStep = 1e-6;
constexpr double kFdTolerance = 1e-6;

class Random {
 public:
  explicit Random(unsigned long long seed) : gen_(seed) {}
  HostVec uniform(std::size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    HostVec v(n);
    for (auto& x : v) x = dist(gen_);
    return v;
  }
  std::vector<index_t> integers(std::size_t n, index_t lo, index_t hi_inclusive) {
    std::uniform_int_distribution<index_t> dist(lo, hi_inclusive);
    std::vector<index_t> v(n);
    for (auto& x : v) x = dist(gen_);
    return v;
  }
  double scalar(double lo, double hi) { return uniform(1, lo, hi)[0]; }

 private:
  std::mt19937_64 gen_;
};

// The values a T-precision kernel actually sees.
template <class T>
HostVec quantize(HostVec v) {
  for (auto& x : v) x = static_cast<double>(widen(static_cast<T>(x)));
  return v;
}

template <class T>
View1<T> to_view1(const std::string& label, const HostVec& v) {
  View1<T> out(label, v.size());
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) host(i) = static_cast<T>(v[i]);
  Kokkos::deep_copy(out, host);
  return out;
}

template <class T>
View2<T> to_view2(const std::string& label, const HostVec& v, index_t rows, index_t cols) {
  EXPECT_EQ(static_cast<index_t>(v.size()), rows * cols);
  View2<T> out(label, rows, cols);
  auto host = Kokkos::create_mirror_view(out);
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) host(r, c) = static_cast<T>(v[r * cols + c]);
  Kokkos::deep_copy(out, host);
  return out;
}

template <class T>
View4<T> to_view4(const std::string& label, const HostVec& v, index_t n0, index_t n1, index_t n2, index_t n3) {
  EXPECT_EQ(static_cast<index_t>(v.size()), n0 * n1 * n2 * n3);
  View4<T> out(label, n0, n1, n2, n3);
  auto host = Kokkos::create_mirror_view(out);
  std::size_t flat = 0;
  for (index_t a = 0; a < n0; ++a)
    for (index_t b = 0; b < n1; ++b)
      for (index_t c = 0; c < n2; ++c)
        for (index_t d = 0; d < n3; ++d) host(a, b, c, d) = static_cast<T>(v[flat++]);
  Kokkos::deep_copy(out, host);
  return out;
}

// The column-sum workspace the bias and LayerNorm gradients need for [rows x cols].
template <class T>
View2<T> column_partials(index_t rows, index_t cols) {
  return View2<T>("column_partials", kernels::column_sum_chunks(rows), cols);
}

inline View1<index_t> to_index_view(const std::string& label, const std::vector<index_t>& v) {
  View1<index_t> out(label, v.size());
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) host(i) = v[i];
  Kokkos::deep_copy(out, host);
  return out;
}

// Any view (rank 1..4, contiguous) back to the host as doubles in row-major order.
template <class ViewT>
HostVec to_host(const ViewT& view) {
  auto host = Kokkos::create_mirror_view(view);
  Kokkos::deep_copy(host, view);
  EXPECT_TRUE(host.span_is_contiguous());
  HostVec out(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) out[i] = static_cast<double>(widen(host.data()[i]));
  return out;
}

// Fills a whole view with quiet NaNs: an output that must be overwritten and
// is instead read shows up as NaN.
template <class ViewT>
void fill_nan(const ViewT& view) {
  Kokkos::deep_copy(view, std::numeric_limits<typename ViewT::non_const_value_type>::quiet_NaN());
}

inline double max_abs(const HostVec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max|got - want| / max|want|; infinite if sizes differ or got has a NaN.
inline double rel_error(const HostVec& got, const HostVec& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    if (!(d == d)) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, d);
  }
  const double scale = max_abs(want);
  return scale > 0.0 ? diff / scale : diff;
}

// got must match a reference that is not identically zero (a zero reference
// would let an all-zero output pass a relative test).
#define MINIATTN_EXPECT_CLOSE(got, want, tol)                                               \
  do {                                                                                      \
    const ::miniattn::ktest::HostVec got_ = (got);                                          \
    const ::miniattn::ktest::HostVec want_ = (want);                                        \
    EXPECT_GT(::miniattn::ktest::max_abs(want_), 0.0) << "reference is identically zero"; \
    EXPECT_LE(::miniattn::ktest::rel_error(got_, want_), (tol)) << #got << " vs " << #want; \
    MINIATTN_KTEST_REPORT(got_, want_, tol, #got);                                          \
  } while (0)

#ifdef MINIATTN_KTEST_VERBOSE
#define MINIATTN_KTEST_REPORT(g, w, tol, name) \
  std::printf("    err %.3e (tol %.0e) %s\n", ::miniattn::ktest::rel_error(g, w), double(tol), name)
#else
#define MINIATTN_KTEST_REPORT(g, w, tol, name) (void)0
#endif

inline HostVec add(const HostVec& a, const HostVec& b) {
  HostVec out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

inline HostVec subtract(const HostVec& a, const HostVec& b) {
  HostVec out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

// sum_i out[i] * g[i] for an output view: the scalar whose gradient the
// backward kernels compute when they are given dy = g.
template <class ViewT>
double weighted_sum(const ViewT& out, const HostVec& g) {
  const HostVec o = to_host(out);
  EXPECT_EQ(o.size(), g.size());
  double s = 0.0;
  for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * g[i];
  return s;
}

// Central finite differences of loss() with respect to every element of a
// float64 input view (perturbed in place, restored afterwards).
template <class ViewT>
HostVec fd_gradient(const ViewT& input, const std::function<double()>& loss, double h = kFdStep) {
  auto host = Kokkos::create_mirror_view(input);
  Kokkos::deep_copy(host, input);
  EXPECT_TRUE(host.span_is_contiguous());
  HostVec grad(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double original = host.data()[i];
    host.data()[i] = original + h;
    Kokkos::deep_copy(input, host);
    const double plus = loss();
    host.data()[i] = original - h;
    Kokkos::deep_copy(input, host);
    const double minus = loss();
    host.data()[i] = original;
    grad[i] = (plus - minus) / (2.0 * h);
  }
  Kokkos::deep_copy(input, host);
  return grad;
}

}  // namespace miniattn::ktest
