// Head-layout permutations and the elementwise helpers against naive host
// index formulas; the split/merge pair checked as a gradient pair too.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernel_test_util.hpp"
#include "kernels/layers/elementwise.hpp"
#include "kernels/layers/head_layout.hpp"

namespace miniattn::ktest {
namespace {

using Precisions = ::testing::Types<float, double>;

// Sizes chosen so that no two of B, H, n, Dh are equal: a swapped index shows.
constexpr index_t kB = 2, kH = 3, kN = 5, kDh = 4, kD = kH * kDh;

// Element (b, h, i, e) of head-major part p (q=0, k=1, v=2) in a token-major [B*n, parts*D] array.
index_t token_major_index(index_t b, index_t h, index_t i, index_t e, index_t part, index_t parts) {
  return (b * kN + i) * (parts * kD) + part * kD + h * kDh + e;
}
index_t head_major_index(index_t b, index_t h, index_t i, index_t e) { return ((b * kH + h) * kN + i) * kDh + e; }

template <class T>
class HeadLayoutTest : public ::testing::Test {};
TYPED_TEST_SUITE(HeadLayoutTest, Precisions);

TYPED_TEST(HeadLayoutTest, SplitAndMergeQkvMatchIndexFormula) {
  using T = TypeParam;
  const index_t total = kB * kH * kN * kDh;
  const HostVec qkv = quantize<T>(Random(501).uniform(kB * kN * 3 * kD, -1, 1));
  View4<T> q("q", kB, kH, kN, kDh), k("k", kB, kH, kN, kDh), v("v", kB, kH, kN, kDh);
  fill_nan(q);
  fill_nan(k);
  fill_nan(v);
  kernels::split_qkv_heads<T>(to_view2<T>("qkv", qkv, kB * kN, 3 * kD), q, k, v);
  HostVec want[3] = {HostVec(total), HostVec(total), HostVec(total)};
  for (index_t b = 0; b < kB; ++b)
    for (index_t h = 0; h < kH; ++h)
      for (index_t i = 0; i < kN; ++i)
        for (index_t e = 0; e < kDh; ++e)
          for (index_t p = 0; p < 3; ++p)
            want[p][head_major_index(b, h, i, e)] = qkv[token_major_index(b, h, i, e, p, 3)];
  EXPECT_EQ(to_host(q), want[0]);
  EXPECT_EQ(to_host(k), want[1]);
  EXPECT_EQ(to_host(v), want[2]);

  View2<T> back("back", kB * kN, 3 * kD);
  fill_nan(back);
  kernels::merge_qkv_heads<T>(q, k, v, back);
  EXPECT_EQ(to_host(back), qkv);
}

// Grouped K/V heads: qkv [B*n, (H + 2 KV) Dh] is q | k | v with KV = 1 head of k and v.
TYPED_TEST(HeadLayoutTest, SplitAndMergeGroupedQkvMatchIndexFormula) {
  using T = TypeParam;
  constexpr index_t KV = 1, columns = kD + 2 * KV * kDh;
  const HostVec qkv = quantize<T>(Random(505).uniform(kB * kN * columns, -1, 1));
  View4<T> q("q", kB, kH, kN, kDh), k("k", kB, KV, kN, kDh), v("v", kB, KV, kN, kDh);
  fill_nan(q);
  fill_nan(k);
  fill_nan(v);
  kernels::split_qkv_heads<T>(to_view2<T>("qkv", qkv, kB * kN, columns), q, k, v);
  HostVec want_q(kB * kH * kN * kDh), want_k(kB * KV * kN * kDh), want_v(want_k.size());
  for (index_t b = 0; b < kB; ++b)
    for (index_t i = 0; i < kN; ++i)
      for (index_t e = 0; e < kDh; ++e) {
        const index_t row = (b * kN + i) * columns;
        for (index_t h = 0; h < kH; ++h) want_q[head_major_index(b, h, i, e)] = qkv[row + h * kDh + e];
        want_k[(b * kN + i) * kDh + e] = qkv[row + kD + e];
        want_v[(b * kN + i) * kDh + e] = qkv[row + kD + KV * kDh + e];
      }
  EXPECT_EQ(to_host(q), want_q);
  EXPECT_EQ(to_host(k), want_k);
  EXPECT_EQ(to_host(v), want_v);

  View2<T> back("back", kB * kN, columns);
  fill_nan(back);
  kernels::merge_qkv_heads<T>(q, k, v, back);
  EXPECT_EQ(to_host(back), qkv);
  View2<T> wrong("wrong", kB * kN, 3 * kD);  // sized for KV = H
  EXPECT_THROW(kernels::merge_qkv_heads<T>(q, k, v, wrong), std::invalid_argument);
}

TYPED_TEST(HeadLayoutTest, SplitAndMergeHeadsMatchIndexFormula) {
  using T = TypeParam;
  const HostVec x = quantize<T>(Random(511).uniform(kB * kN * kD, -1, 1));
  View4<T> xh("xh", kB, kH, kN, kDh);
  fill_nan(xh);
  kernels::split_heads<T>(to_view2<T>("x", x, kB * kN, kD), xh);
  HostVec want(x.size());
  for (index_t b = 0; b < kB; ++b)
    for (index_t h = 0; h < kH; ++h)
      for (index_t i = 0; i < kN; ++i)
        for (index_t e = 0; e < kDh; ++e) want[head_major_index(b, h, i, e)] = x[token_major_index(b, h, i, e, 0, 1)];
  EXPECT_EQ(to_host(xh), want);

  // merge_heads applied to an independent head-major array.
  const HostVec heads = quantize<T>(Random(512).uniform(x.size(), -1, 1));
  View2<T> merged("merged", kB * kN, kD);
  fill_nan(merged);
  kernels::merge_heads<T>(to_view4<T>("heads", heads, kB, kH, kN, kDh), merged);
  HostVec want_merged(x.size());
  for (index_t b = 0; b < kB; ++b)
    for (index_t h = 0; h < kH; ++h)
      for (index_t i = 0; i < kN; ++i)
        for (index_t e = 0; e < kDh; ++e)
          want_merged[token_major_index(b, h, i, e, 0, 1)] = heads[head_major_index(b, h, i, e)];
  EXPECT_EQ(to_host(merged), want_merged);
}

// merge_qkv_heads is the backward of split_qkv_heads: with L = sum(q Gq + k Gk + v Gv),
// dL/dqkv = merge(Gq, Gk, Gv). Likewise merge_heads is the backward of split_heads.
TEST(HeadLayout, MergeIsTheGradientOfSplit) {
  Random rng(521);
  const index_t total = kB * kH * kN * kDh;
  auto qkv = to_view2<double>("qkv", rng.uniform(kB * kN * 3 * kD, -1, 1), kB * kN, 3 * kD);
  const HostVec gq = rng.uniform(total, -1, 1), gk = rng.uniform(total, -1, 1), gv = rng.uniform(total, -1, 1);
  View4<double> q("q", kB, kH, kN, kDh), k("k", kB, kH, kN, kDh), v("v", kB, kH, kN, kDh);
  auto loss = [&]() {
    kernels::split_qkv_heads<double>(qkv, q, k, v);
    return weighted_sum(q, gq) + weighted_sum(k, gk) + weighted_sum(v, gv);
  };
  View2<double> dqkv("dqkv", kB * kN, 3 * kD);
  kernels::merge_qkv_heads<double>(to_view4<double>("gq", gq, kB, kH, kN, kDh), to_view4<double>("gk", gk, kB, kH, kN, kDh),
                                   to_view4<double>("gv", gv, kB, kH, kN, kDh), dqkv);
  MINIATTN_EXPECT_CLOSE(to_host(dqkv), fd_gradient(qkv, loss), kFdTolerance);

  auto x = to_view2<double>("x", rng.uniform(kB * kN * kD, -1, 1), kB * kN, kD);
  View4<double> xh("xh", kB, kH, kN, kDh);
  auto loss_heads = [&]() {
    kernels::split_heads<double>(x, xh);
    return weighted_sum(xh, gq);
  };
  View2<double> dx("dx", kB * kN, kD);
  kernels::merge_heads<double>(to_view4<double>("g", gq, kB, kH, kN, kDh), dx);
  MINIATTN_EXPECT_CLOSE(to_host(dx), fd_gradient(x, loss_heads), kFdTolerance);
}

TEST(HeadLayout, RejectsMismatchedShapes) {
  View4<double> q("q", kB, kH, kN, kDh), k("k", kB, kH, kN, kDh), v("v", kB, kH, kN, kDh);
  View4<double> v_bad("v_bad", kB, kH, kN + 1, kDh);
  View2<double> qkv("qkv", kB * kN, 3 * kD), qkv_bad("qkv_bad", kB * kN, 3 * kD - 1);
  EXPECT_THROW(kernels::split_qkv_heads<double>(qkv_bad, q, k, v), std::invalid_argument);
  EXPECT_THROW(kernels::split_qkv_heads<double>(qkv, q, k, v_bad), std::invalid_argument);
  EXPECT_THROW(kernels::merge_heads<double>(q, View2<double>("x", kB * kN + 1, kD)), std::invalid_argument);
  EXPECT_NO_THROW(kernels::split_qkv_heads<double>(qkv, q, k, v));
}

// -------------------------------------------------------------- elementwise

template <class T>
class ElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseTest, Precisions);

// z = x + y into a third view and in place of either operand, the same bits.
TYPED_TEST(ElementwiseTest, Add) {
  using T = TypeParam;
  const index_t rows = 7, cols = 9;
  Random rng(601);
  const HostVec x0 = quantize<T>(rng.uniform(rows * cols, -1, 1)), y0 = quantize<T>(rng.uniform(rows * cols, -1, 1));
  const auto x = to_view2<T>("x", x0, rows, cols), y = to_view2<T>("y", y0, rows, cols);
  const View2<T> z("z", rows, cols);
  kernels::add<T>(z, x, y);
  MINIATTN_EXPECT_CLOSE(to_host(z), add(x0, y0), Tolerance<T>::forward);
  kernels::add<T>(x, x, y);
  EXPECT_EQ(to_host(x), to_host(z));
  kernels::add<T>(y, z, y);
  MINIATTN_EXPECT_CLOSE(to_host(y), add(add(x0, y0), y0), 2 * Tolerance<T>::forward);
  EXPECT_THROW(kernels::add<T>(z, x, View2<T>("y_bad", rows, cols + 1)), std::invalid_argument);
  EXPECT_THROW(kernels::add<T>(View2<T>("z_bad", rows + 1, cols), x, y), std::invalid_argument);
}

}  // namespace
}  // namespace miniattn::ktest
