// The kernels of Ring Self-Attention (src/kernels/attention/dense/dense_attention.*: score
// blocks, softmax over a row of blocks, apply, block backward) against a naive
// float64 attention over the concatenated key blocks, their backward against
// central finite differences; and the Ulysses exchange layouts
// (src/kernels/layers/ulysses_layout.*) against their index formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/attention/dense/dense_attention.hpp"
#include "kernels/layers/ulysses_layout.hpp"

namespace miniattn::ktest {
namespace {

using Precisions = ::testing::Types<float, double>;

// ------------------------------------------------------------ ulysses layouts

// U = 2 ranks, B = 2, Hl = 3 heads per rank after the exchange, n = 5 rows
// per rank before it; Dh = 17 is more than one SIMD pack and not a multiple.
constexpr index_t kU = 2, kSamples = 2, kHl = 3, kRowsPerRank = 5, kLayoutHeadDim = 17;

index_t buffer_index(index_t j, index_t b, index_t h, index_t i, index_t d) {
  return (((j * kSamples + b) * kHl + h) * kRowsPerRank + i) * kLayoutHeadDim + d;
}

template <class T>
class UlyssesLayoutTest : public ::testing::Test {};
TYPED_TEST_SUITE(UlyssesLayoutTest, Precisions);

// buffer[j, b, h, i, d] = x[b, j*Hl + h, i, d]; unpack_heads inverts it.
TYPED_TEST(UlyssesLayoutTest, PackHeadsMatchesIndexFormula) {
  using T = TypeParam;
  const index_t H = kU * kHl;
  const HostVec x = quantize<T>(Random(601).uniform(kSamples * H * kRowsPerRank * kLayoutHeadDim, -1, 1));
  kernels::View5<T> buffer("buffer", kU, kSamples, kHl, kRowsPerRank, kLayoutHeadDim);
  fill_nan(buffer);
  kernels::pack_heads<T>(to_view4<T>("x", x, kSamples, H, kRowsPerRank, kLayoutHeadDim), buffer);
  HostVec want(x.size());
  for (index_t j = 0; j < kU; ++j)
    for (index_t b = 0; b < kSamples; ++b)
      for (index_t h = 0; h < kHl; ++h)
        for (index_t i = 0; i < kRowsPerRank; ++i)
          for (index_t d = 0; d < kLayoutHeadDim; ++d)
            want[buffer_index(j, b, h, i, d)] = x[((b * H + j * kHl + h) * kRowsPerRank + i) * kLayoutHeadDim + d];
  EXPECT_EQ(to_host(buffer), want);
  View4<T> back("back", kSamples, H, kRowsPerRank, kLayoutHeadDim);
  fill_nan(back);
  kernels::unpack_heads<T>(buffer, back);
  EXPECT_EQ(to_host(back), x);
}

// Grouped K/V heads fewer than the ranks (GQA): U = 4 ranks, one head each, from
// KV = 2 heads. pack_heads sends head j / 2 to rank j; unpack_heads sums the
// two replicas of each head (the gradients of its copies), in rank order.
TYPED_TEST(UlyssesLayoutTest, ReplicatedHeadsPackAndSum) {
  using T = TypeParam;
  constexpr index_t U = 4, KV = 2;
  const HostVec x = quantize<T>(Random(611).uniform(kSamples * KV * kRowsPerRank * kLayoutHeadDim, -1, 1));
  kernels::View5<T> buffer("buffer", U, kSamples, 1, kRowsPerRank, kLayoutHeadDim);
  fill_nan(buffer);
  kernels::pack_heads<T>(to_view4<T>("x", x, kSamples, KV, kRowsPerRank, kLayoutHeadDim), buffer);
  const auto x_at = [&](index_t b, index_t h, index_t i, index_t d) { return x[((b * KV + h) * kRowsPerRank + i) * kLayoutHeadDim + d]; };
  HostVec want(static_cast<std::size_t>(U * kSamples * kRowsPerRank * kLayoutHeadDim));
  for (index_t j = 0; j < U; ++j)
    for (index_t b = 0; b < kSamples; ++b)
      for (index_t i = 0; i < kRowsPerRank; ++i)
        for (index_t d = 0; d < kLayoutHeadDim; ++d) want[((j * kSamples + b) * kRowsPerRank + i) * kLayoutHeadDim + d] = x_at(b, j / (U / KV), i, d);
  EXPECT_EQ(to_host(buffer), want);

  const HostVec grads = quantize<T>(Random(612).uniform(want.size(), -1, 1));
  kernels::View5<T> grad_buffer("grad_buffer", U, kSamples, 1, kRowsPerRank, kLayoutHeadDim);
  auto host = Kokkos::create_mirror_view(grad_buffer);
  std::copy(grads.begin(), grads.end(), host.data());
  Kokkos::deep_copy(grad_buffer, host);
  View4<T> summed("summed", kSamples, KV, kRowsPerRank, kLayoutHeadDim);
  fill_nan(summed);
  kernels::unpack_heads<T>(grad_buffer, summed);
  HostVec want_sum(x.size());
  for (index_t b = 0; b < kSamples; ++b)
    for (index_t h = 0; h < KV; ++h)
      for (index_t i = 0; i < kRowsPerRank; ++i)
        for (index_t d = 0; d < kLayoutHeadDim; ++d) {
          const auto g = [&](index_t j) { return grads[((j * kSamples + b) * kRowsPerRank + i) * kLayoutHeadDim + d]; };
          want_sum[((b * KV + h) * kRowsPerRank + i) * kLayoutHeadDim + d] = static_cast<double>(static_cast<T>(g(2 * h) + g(2 * h + 1)));
        }
  EXPECT_EQ(to_host(summed), want_sum);
}

// buffer[s, b, h, i, d] = y[b, h, rows(s*n + i), d] for a permutation rows
// (gathered_rows'), and one that is not the identity; unpack_rows inverts it.
TYPED_TEST(UlyssesLayoutTest, PackRowsMatchesIndexFormula) {
  using T = TypeParam;
  const index_t rows = kU * kRowsPerRank;
  std::vector<index_t> gathered(static_cast<std::size_t>(rows));
  for (index_t r = 0; r < rows; ++r) gathered[static_cast<std::size_t>(r)] = (3 * r + 1) % rows;  // 3 and 10 coprime
  View1<index_t> gathered_rows("gathered_rows", rows);
  Kokkos::deep_copy(gathered_rows, Kokkos::View<const index_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                       gathered.data(), gathered.size()));
  const HostVec y = quantize<T>(Random(611).uniform(kSamples * kHl * rows * kLayoutHeadDim, -1, 1));
  kernels::View5<T> buffer("buffer", kU, kSamples, kHl, kRowsPerRank, kLayoutHeadDim);
  fill_nan(buffer);
  kernels::pack_rows<T>(to_view4<T>("y", y, kSamples, kHl, rows, kLayoutHeadDim), gathered_rows, buffer);
  HostVec want(y.size());
  for (index_t s = 0; s < kU; ++s)
    for (index_t b = 0; b < kSamples; ++b)
      for (index_t h = 0; h < kHl; ++h)
        for (index_t i = 0; i < kRowsPerRank; ++i)
          for (index_t d = 0; d < kLayoutHeadDim; ++d)
            want[buffer_index(s, b, h, i, d)] =
                y[((b * kHl + h) * rows + gathered[static_cast<std::size_t>(s * kRowsPerRank + i)]) * kLayoutHeadDim + d];
  EXPECT_EQ(to_host(buffer), want);
  View4<T> back("back", kSamples, kHl, rows, kLayoutHeadDim);
  fill_nan(back);
  kernels::unpack_rows<T>(buffer, gathered_rows, back);
  EXPECT_EQ(to_host(back), y);
}

// ------------------------------------------------------------ RSA dense blocks

// B = 1, H = 4, n = 4 queries at positions 3..6, G = 2 key blocks of 3 keys
// (positions 0..2 and 5..7, so that the causal mask cuts the second block),
// Dh = 5; K/V heads KV = 4, 2 or 1 (grouped: query head h reads K/V head
// h / (H / KV)).
constexpr index_t kHeads = 4, kQueries = 4, kBlocks = 2, kKeys = 3, kHeadDim = 5;
const index_t kKvHeads[] = {4, 2, 1};
const std::vector<index_t> kQueryPos = {3, 4, 5, 6};
const std::vector<index_t> kKeyPos[kBlocks] = {{0, 1, 2}, {5, 6, 7}};

struct DenseInputs {
  index_t kv_heads;
  HostVec q, k[kBlocks], v[kBlocks], g;  // g: dL/d(out)
  DenseInputs(unsigned seed, index_t kv) : kv_heads(kv) {
    Random rng(seed);
    q = rng.uniform(kHeads * kQueries * kHeadDim, -1, 1);
    for (index_t g_ = 0; g_ < kBlocks; ++g_) {
      k[g_] = rng.uniform(kv * kKeys * kHeadDim, -1, 1);
      v[g_] = rng.uniform(kv * kKeys * kHeadDim, -1, 1);
    }
    g = rng.uniform(kHeads * kQueries * kHeadDim, -1, 1);
  }
};

// Naive float64 attention of the queries over both key blocks: out and lse.
void reference_attention(const DenseInputs& in, bool causal, HostVec& out, HostVec& lse) {
  out.assign(kHeads * kQueries * kHeadDim, 0.0);
  lse.assign(kHeads * kQueries, 0.0);
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  for (index_t h = 0; h < kHeads; ++h)
    for (index_t i = 0; i < kQueries; ++i) {
      const index_t hk = h / (kHeads / in.kv_heads);
      std::vector<double> s;
      std::vector<const double*> values;
      for (index_t blk = 0; blk < kBlocks; ++blk)
        for (index_t j = 0; j < kKeys; ++j) {
          if (causal && kKeyPos[blk][j] > kQueryPos[i]) continue;
          double dot = 0.0;
          for (index_t d = 0; d < kHeadDim; ++d)
            dot += in.q[(h * kQueries + i) * kHeadDim + d] * in.k[blk][(hk * kKeys + j) * kHeadDim + d];
          s.push_back(scale * dot);
          values.push_back(&in.v[blk][(hk * kKeys + j) * kHeadDim]);
        }
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) sum += std::exp(x - m);
      for (std::size_t t = 0; t < s.size(); ++t)
        for (index_t d = 0; d < kHeadDim; ++d)
          out[(h * kQueries + i) * kHeadDim + d] += std::exp(s[t] - m) / sum * values[t][d];
      lse[h * kQueries + i] = m + std::log(sum);
    }
}

// The RSA forward through the dense kernels: scores of both blocks, one
// softmax over the row of blocks, out = sum over blocks of P v.
template <class T>
struct DenseForward {
  View4<T> q, k[kBlocks], v[kBlocks], out;
  kernels::View5<T> probabilities;
  View3<T> lse;
  View1<index_t> q_pos, k_pos[kBlocks];
  bool causal;

  DenseForward(const DenseInputs& in, bool causal_mask)
      : q(to_view4<T>("q", in.q, 1, kHeads, kQueries, kHeadDim)),
        out("out", 1, kHeads, kQueries, kHeadDim),
        probabilities("probabilities", kBlocks, 1, kHeads, kQueries, kKeys),
        lse("lse", 1, kHeads, kQueries),
        q_pos(to_index_view("q_pos", kQueryPos)),
        causal(causal_mask) {
    for (index_t blk = 0; blk < kBlocks; ++blk) {
      k[blk] = to_view4<T>("k", in.k[blk], 1, in.kv_heads, kKeys, kHeadDim);
      v[blk] = to_view4<T>("v", in.v[blk], 1, in.kv_heads, kKeys, kHeadDim);
      k_pos[blk] = to_index_view("k_pos", kKeyPos[blk]);
    }
    run();
  }
  View4<T> block(index_t blk) const {
    return View4<T>(probabilities.data() + blk * kHeads * kQueries * kKeys, 1, kHeads, kQueries, kKeys);
  }
  void run() {
    for (index_t blk = 0; blk < kBlocks; ++blk) kernels::score_block<T>(q, k[blk], q_pos, k_pos[blk], causal, block(blk));
    kernels::softmax_over_blocks<T>(probabilities, lse);
    Kokkos::deep_copy(out, T(0));
    for (index_t blk = 0; blk < kBlocks; ++blk) kernels::apply_probabilities<T>(block(blk), v[blk], out);
  }
};

template <class T>
class DenseAttentionTest : public ::testing::Test {};
TYPED_TEST_SUITE(DenseAttentionTest, Precisions);

TYPED_TEST(DenseAttentionTest, ForwardMatchesNaiveAttention) {
  using T = TypeParam;
  for (const index_t kv : kKvHeads)
    for (bool causal : {false, true}) {
      SCOPED_TRACE("kv_heads " + std::to_string(kv) + (causal ? ", causal" : ""));
      DenseInputs in(701 + causal, kv);
      in.q = quantize<T>(in.q);
      for (index_t blk = 0; blk < kBlocks; ++blk) {
        in.k[blk] = quantize<T>(in.k[blk]);
        in.v[blk] = quantize<T>(in.v[blk]);
      }
      const DenseForward<T> f(in, causal);
      HostVec out, lse;
      reference_attention(in, causal, out, lse);
      MINIATTN_EXPECT_CLOSE(to_host(f.out), out, Tolerance<T>::forward);
      MINIATTN_EXPECT_CLOSE(to_host(f.lse), lse, Tolerance<T>::forward);
    }
}

// L = sum(out * g): dense_block_backward over both blocks against central
// finite differences of the forward, for q, every k and every v (a K/V head's
// gradient sums over its group of query heads).
TEST(DenseAttention, BackwardMatchesFiniteDifferences) {
  for (const index_t kv : kKvHeads)
    for (bool causal : {false, true}) {
      SCOPED_TRACE("kv_heads " + std::to_string(kv) + (causal ? ", causal" : ""));
      const DenseInputs in(711 + causal, kv);
      DenseForward<double> f(in, causal);
      auto loss = [&]() {
        f.run();
        return weighted_sum(f.out, in.g);
      };
      const View4<double> dout = to_view4<double>("dout", in.g, 1, kHeads, kQueries, kHeadDim);
      View3<double> delta("delta", 1, kHeads, kQueries);
      const HostVec out = to_host(f.out), g = in.g;
      {
        auto host = Kokkos::create_mirror_view(delta);
        for (index_t r = 0; r < kHeads * kQueries; ++r) {
          double s = 0.0;
          for (index_t d = 0; d < kHeadDim; ++d) s += out[r * kHeadDim + d] * g[r * kHeadDim + d];
          host.data()[r] = s;
        }
        Kokkos::deep_copy(delta, host);
      }
      View4<double> dq("dq", 1, kHeads, kQueries, kHeadDim);
      View4<double> dk[kBlocks], dv[kBlocks];
      View4<double> score_grads("score_grads", 1, kHeads, 3, kKeys);  // 3 of the 4 query rows at a time
      for (index_t blk = 0; blk < kBlocks; ++blk) {
        dk[blk] = View4<double>("dk", 1, kv, kKeys, kHeadDim);
        dv[blk] = View4<double>("dv", 1, kv, kKeys, kHeadDim);
        kernels::dense_block_backward<double>(f.block(blk), f.q, f.k[blk], f.v[blk], dout, delta, score_grads, dq,
                                              dk[blk], dv[blk]);
      }
      MINIATTN_EXPECT_CLOSE(to_host(dq), fd_gradient(f.q, loss), kFdTolerance);
      for (index_t blk = 0; blk < kBlocks; ++blk) {
        MINIATTN_EXPECT_CLOSE(to_host(dk[blk]), fd_gradient(f.k[blk], loss), kFdTolerance);
        MINIATTN_EXPECT_CLOSE(to_host(dv[blk]), fd_gradient(f.v[blk], loss), kFdTolerance);
      }
    }
}

}  // namespace
}  // namespace miniattn::ktest
