// Embedding and cross-entropy against naive float64 host loops; their
// backward passes against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "kernel_test_util.hpp"
#include "kernels/base/ordered_sum.hpp"
#include "kernels/layers/cross_entropy.hpp"
#include "kernels/layers/embedding.hpp"

namespace miniattn::ktest {
namespace {

using Precisions = ::testing::Types<float, double>;

// embedding_backward with the token grouping the model builds in its forward pass.
template <class T>
void embedding_backward(const View2<T>& dx, const View1<index_t>& tokens, const View1<index_t>& wpe_row,
                        const View2<T>& dwte, const View2<T>& dwpe) {
  kernels::TokenRows grouped(static_cast<index_t>(dwte.extent(0)), static_cast<index_t>(tokens.extent(0)));
  kernels::group_rows_by_token(tokens, grouped);
  embedding_backward<T>(dx, grouped, wpe_row, dwte, dwpe);
}

// The loss sum as the model computes it: per-row losses summed in a fixed order.
template <class T>
double loss_sum(const View2<T>& logits, const View1<index_t>& targets) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  View1<T> lse("lse", rows);
  View1<double> loss("loss", rows);
  kernels::cross_entropy_forward<T>(logits, targets, lse, loss);
  return kernels::OrderedSum(rows).sum<double>(loss);
}

// cross_entropy_backward with the log-sum-exp of its forward pass.
template <class T>
void cross_entropy_backward(const View2<T>& logits, const View1<index_t>& targets, T scale, const View2<T>& dlogits) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  View1<T> lse("lse", rows);
  View1<double> loss("loss", rows);
  kernels::cross_entropy_forward<T>(logits, targets, lse, loss);
  kernels::cross_entropy_backward<T>(logits, targets, lse, scale, dlogits);
}

// A layout like a rank's: 3 samples of 5 local positions whose wpe rows are
// scattered over a local block of 8 rows (3 rows unused), tokens repeating.
struct EmbeddingCase {
  static constexpr index_t samples = 3, n = 5, d = 6, vocab = 7, wpe_rows = 8;
  static constexpr index_t rows = samples * n;
  std::vector<index_t> tokens;
  std::vector<index_t> wpe_row = {6, 0, 3, 7, 2};
  HostVec wte, wpe;
  explicit EmbeddingCase(unsigned seed) {
    Random rng(seed);
    tokens = rng.integers(rows, 0, vocab - 1);
    tokens[3] = tokens[9] = tokens[14] = 2;  // certainly repeated
    wte = rng.uniform(vocab * d, -1, 1);
    wpe = rng.uniform(wpe_rows * d, -1, 1);
  }
};

HostVec reference_embedding(const EmbeddingCase& c, const HostVec& wte, const HostVec& wpe) {
  HostVec x(c.rows * c.d);
  for (index_t r = 0; r < c.rows; ++r)
    for (index_t j = 0; j < c.d; ++j)
      x[r * c.d + j] = wte[c.tokens[r] * c.d + j] + wpe[c.wpe_row[r % c.n] * c.d + j];
  return x;
}

template <class T>
class EmbeddingTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingTest, Precisions);

TYPED_TEST(EmbeddingTest, ForwardMatchesReference) {
  using T = TypeParam;
  const EmbeddingCase c(301);
  const HostVec wte = quantize<T>(c.wte), wpe = quantize<T>(c.wpe);
  View2<T> x("x", c.rows, c.d);
  fill_nan(x);
  kernels::embedding_forward<T>(to_index_view("tokens", c.tokens), to_index_view("wpe_row", c.wpe_row),
                                to_view2<T>("wte", wte, c.vocab, c.d), to_view2<T>("wpe", wpe, c.wpe_rows, c.d), x);
  // A sum of two values: exact up to one rounding in either precision.
  MINIATTN_EXPECT_CLOSE(to_host(x), reference_embedding(c, wte, wpe), Tolerance<T>::forward);
}

TEST(Embedding, RejectsBadIndicesAndShapes) {
  const EmbeddingCase c(311);
  auto wte = to_view2<double>("wte", c.wte, c.vocab, c.d);
  auto wpe = to_view2<double>("wpe", c.wpe, c.wpe_rows, c.d);
  View2<double> x("x", c.rows, c.d);
  auto bad_tokens = c.tokens;
  bad_tokens[4] = c.vocab;
  EXPECT_THROW(kernels::embedding_forward<double>(to_index_view("t", bad_tokens), to_index_view("p", c.wpe_row), wte,
                                                  wpe, x),
               std::invalid_argument);
  auto bad_rows = c.wpe_row;
  bad_rows[1] = -1;
  EXPECT_THROW(kernels::embedding_forward<double>(to_index_view("t", c.tokens), to_index_view("p", bad_rows), wte,
                                                  wpe, x),
               std::invalid_argument);
  // a negative first row
  EXPECT_THROW(kernels::embedding_forward<double>(to_index_view("t", c.tokens), to_index_view("p", c.wpe_row), wte,
                                                  wpe, x, -1),
               std::invalid_argument);
}

// A tensor-parallel rank holds a contiguous chunk of the (sample, position)
// rows, which may begin and end inside a sample: the chunks' embeddings are
// the full embedding's rows, and their gradients add up to the full one.
TEST(Embedding, ChunksOfRowsAddUpToTheWhole) {
  const EmbeddingCase c(341);
  auto wte = to_view2<double>("wte", c.wte, c.vocab, c.d);
  auto wpe = to_view2<double>("wpe", c.wpe, c.wpe_rows, c.d);
  const HostVec g = Random(342).uniform(c.rows * c.d, -1, 1);
  View2<double> whole_dwte("dwte", c.vocab, c.d), whole_dwpe("dwpe", c.wpe_rows, c.d);
  embedding_backward<double>(to_view2<double>("dx", g, c.rows, c.d), to_index_view("t", c.tokens),
                             to_index_view("p", c.wpe_row), whole_dwte, whole_dwpe);
  const HostVec x = reference_embedding(c, c.wte, c.wpe);
  View2<double> dwte("dwte", c.vocab, c.d), dwpe("dwpe", c.wpe_rows, c.d);
  for (const auto& [first, count] : std::vector<std::pair<index_t, index_t>>{{0, 7}, {7, 1}, {8, 7}}) {
    const std::vector<index_t> tokens(c.tokens.begin() + first, c.tokens.begin() + first + count);
    View2<double> chunk("chunk", count, c.d);
    kernels::embedding_forward<double>(to_index_view("t", tokens), to_index_view("p", c.wpe_row), wte, wpe, chunk,
                                       first);
    MINIATTN_EXPECT_CLOSE(to_host(chunk), HostVec(x.begin() + first * c.d, x.begin() + (first + count) * c.d), 0.0);
    const HostVec dx(g.begin() + first * c.d, g.begin() + (first + count) * c.d);
    kernels::TokenRows grouped(c.vocab, count);
    kernels::group_rows_by_token(to_index_view("t", tokens), grouped);
    kernels::embedding_backward<double>(to_view2<double>("dx", dx, count, c.d), grouped,
                                        to_index_view("p", c.wpe_row), dwte, dwpe, first);
  }
  MINIATTN_EXPECT_CLOSE(to_host(dwte), to_host(whole_dwte), 1e-14);
  MINIATTN_EXPECT_CLOSE(to_host(dwpe), to_host(whole_dwpe), 1e-14);
}

// L = sum(x * G); dwte and dwpe_local are pre-filled (accumulated).
TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const EmbeddingCase c(321);
  auto tokens = to_index_view("tokens", c.tokens);
  auto wpe_row = to_index_view("wpe_row", c.wpe_row);
  auto wte = to_view2<double>("wte", c.wte, c.vocab, c.d);
  auto wpe = to_view2<double>("wpe", c.wpe, c.wpe_rows, c.d);
  Random rng(322);
  const HostVec g = rng.uniform(c.rows * c.d, -1, 1);
  View2<double> x("x", c.rows, c.d);
  auto loss = [&]() {
    kernels::embedding_forward<double>(tokens, wpe_row, wte, wpe, x);
    return weighted_sum(x, g);
  };
  const HostVec dwte0 = rng.uniform(c.vocab * c.d, -1, 1), dwpe0 = rng.uniform(c.wpe_rows * c.d, -1, 1);
  auto dwte = to_view2<double>("dwte", dwte0, c.vocab, c.d);
  auto dwpe = to_view2<double>("dwpe", dwpe0, c.wpe_rows, c.d);
  embedding_backward<double>(to_view2<double>("dx", g, c.rows, c.d), tokens, wpe_row, dwte, dwpe);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dwte), dwte0), fd_gradient(wte, loss), kFdTolerance);
  MINIATTN_EXPECT_CLOSE(subtract(to_host(dwpe), dwpe0), fd_gradient(wpe, loss), kFdTolerance);
}

TEST(Embedding, FloatBackwardMatchesDouble) {
  const EmbeddingCase c(331);
  const HostVec g = quantize<float>(Random(332).uniform(c.rows * c.d, -1, 1));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    View2<T> dwte("dwte", c.vocab, c.d), dwpe("dwpe", c.wpe_rows, c.d);
    embedding_backward<T>(to_view2<T>("dx", g, c.rows, c.d), to_index_view("t", c.tokens),
                                   to_index_view("p", c.wpe_row), dwte, dwpe);
    return std::make_tuple(to_host(dwte), to_host(dwpe));
  };
  const auto [wtef, wpef] = run(0.0f);
  const auto [wted, wped] = run(0.0);
  MINIATTN_EXPECT_CLOSE(wtef, wted, Tolerance<float>::forward);
  MINIATTN_EXPECT_CLOSE(wpef, wped, Tolerance<float>::forward);
}

// Each token's rows, in increasing row order; tokens outside the vocabulary are refused.
TEST(Embedding, GroupsRowsByToken) {
  const std::vector<index_t> tokens = {3, 0, 3, 1, 3, 0};
  kernels::TokenRows grouped(5, 6);
  kernels::group_rows_by_token(to_index_view("t", tokens), grouped);
  const std::vector<index_t> offsets = {0, 2, 3, 3, 6, 6}, rows = {1, 5, 3, 0, 2, 4};
  auto as_index = [](const HostVec& v) { return std::vector<index_t>(v.begin(), v.end()); };
  EXPECT_EQ(as_index(to_host(grouped.offsets)), offsets);
  EXPECT_EQ(as_index(to_host(grouped.rows)), rows);
  EXPECT_THROW(kernels::group_rows_by_token(to_index_view("t", {3, 5, 0, 0, 0, 0}), grouped), std::invalid_argument);
  EXPECT_THROW(kernels::group_rows_by_token(to_index_view("t", {0, 0}), grouped), std::invalid_argument);
}

// --------------------------------------------------------- cross-entropy

// sum_r [log(sum_j exp(l_rj)) - l_r,t_r], written directly (no max shift).
double reference_loss_sum(const HostVec& logits, const std::vector<index_t>& targets, index_t rows, index_t vocab,
                          double shift = 0.0) {
  double total = 0.0;
  for (index_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (index_t j = 0; j < vocab; ++j) s += std::exp(logits[r * vocab + j] - shift);
    total += std::log(s) - (logits[r * vocab + targets[r]] - shift);
  }
  return total;
}

template <class T>
class CrossEntropyTest : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyTest, Precisions);

TYPED_TEST(CrossEntropyTest, LossMatchesReference) {
  using T = TypeParam;
  const index_t rows = 11, vocab = 29;
  Random rng(401);
  const HostVec logits = quantize<T>(rng.uniform(rows * vocab, -4, 4));
  const auto targets = rng.integers(rows, 0, vocab - 1);
  const double got = loss_sum<T>(to_view2<T>("l", logits, rows, vocab),
                                                        to_index_view("t", targets));
  const double want = reference_loss_sum(logits, targets, rows, vocab);
  EXPECT_LE(std::fabs(got - want), Tolerance<T>::forward * std::fabs(want)) << got << " vs " << want;
}

// Logits far beyond exp's range: only a max-subtracting kernel stays finite.
TYPED_TEST(CrossEntropyTest, LossIsStableForHugeLogits) {
  using T = TypeParam;
  const index_t rows = 6, vocab = 17;
  const double shift = std::is_same<T, float>::value ? 300.0 : 3000.0;  // exp overflows at 88 / 709
  Random rng(411);
  HostVec logits = rng.uniform(rows * vocab, -4, 4);
  for (auto& v : logits) v += shift;
  logits = quantize<T>(logits);
  const auto targets = rng.integers(rows, 0, vocab - 1);
  const double got = loss_sum<T>(to_view2<T>("l", logits, rows, vocab),
                                                        to_index_view("t", targets));
  const double want = reference_loss_sum(logits, targets, rows, vocab, shift);
  ASSERT_TRUE(std::isfinite(got));
  EXPECT_LE(std::fabs(got - want), Tolerance<T>::forward * std::fabs(want)) << got << " vs " << want;
}

TEST(CrossEntropy, RejectsBadTargets) {
  View2<double> logits("l", 3, 4);
  EXPECT_THROW(loss_sum<double>(logits, to_index_view("t", {0, 4, 1})), std::invalid_argument);
  EXPECT_THROW(loss_sum<double>(logits, to_index_view("t", {0, -1, 1})),
               std::invalid_argument);
  EXPECT_THROW(loss_sum<double>(logits, to_index_view("t", {0, 1})), std::invalid_argument);
}

// L = scale * loss_sum, so dL/dlogits = scale (softmax - onehot): the kernel's output with that scale.
TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const index_t rows = 8, vocab = 19;
  Random rng(421);
  auto logits = to_view2<double>("logits", rng.uniform(rows * vocab, -3, 3), rows, vocab);
  auto targets = to_index_view("t", rng.integers(rows, 0, vocab - 1));
  const double scale = 0.37;
  auto loss = [&]() { return scale * loss_sum<double>(logits, targets); };
  View2<double> dlogits("dlogits", rows, vocab);
  fill_nan(dlogits);
  cross_entropy_backward<double>(logits, targets, scale, dlogits);
  MINIATTN_EXPECT_CLOSE(to_host(dlogits), fd_gradient(logits, loss), kFdTolerance);

  // In place: dlogits aliasing logits gives the same numbers.
  View2<double> inplace("inplace", rows, vocab);
  Kokkos::deep_copy(inplace, logits);
  cross_entropy_backward<double>(inplace, targets, scale, inplace);
  EXPECT_EQ(to_host(inplace), to_host(dlogits));
}

TEST(CrossEntropy, FloatBackwardMatchesDouble) {
  const index_t rows = 10, vocab = 31;
  Random rng(431);
  const HostVec logits = quantize<float>(rng.uniform(rows * vocab, -5, 5));
  const auto targets = rng.integers(rows, 0, vocab - 1);
  View2<float> df("df", rows, vocab);
  View2<double> dd("dd", rows, vocab);
  cross_entropy_backward<float>(to_view2<float>("l", logits, rows, vocab), to_index_view("t", targets),
                                         0.5f, df);
  cross_entropy_backward<double>(to_view2<double>("l", logits, rows, vocab), to_index_view("t", targets),
                                          0.5, dd);
  MINIATTN_EXPECT_CLOSE(to_host(df), to_host(dd), Tolerance<float>::forward);
}

}  // namespace
}  // namespace miniattn::ktest
