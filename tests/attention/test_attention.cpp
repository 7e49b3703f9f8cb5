// Both attention kernels (src/kernels/attention/: fused/, gemm/): the fused flash-style
// kernel and chunked attention through GEMMs, each against an independent naive
// float64 reference that builds the whole score matrix. Every test runs once
// per kernel (the suites are parameterised by kernels.attention).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "kernels/base/simd_bf16_dot.hpp"
#include "sdpa_emulation.hpp"

namespace {

using miniattn::index_t;
using miniattn::View1;
using miniattn::View3;
using miniattn::View4;
using miniattn::AttentionKernel;
using miniattn::kernels::AttentionBlocking;
using miniattn::kernels::AttentionWorkspace;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Host problem description, all float64, [B, H, n, Dh] row-major.
struct Problem {
  index_t batch = 0, heads = 0, dh = 0;
  std::vector<index_t> q_pos, k_pos;
  std::vector<double> q, k, v;
  index_t nq() const { return static_cast<index_t>(q_pos.size()); }
  index_t nk() const { return static_cast<index_t>(k_pos.size()); }
};

std::vector<index_t> range_positions(index_t first, index_t last_exclusive) {
  std::vector<index_t> p(static_cast<std::size_t>(last_exclusive - first));
  std::iota(p.begin(), p.end(), first);
  return p;
}

std::vector<index_t> concat(std::vector<index_t> a, const std::vector<index_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<double> random_values(std::size_t count, std::uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sigma);
  std::vector<double> x(count);
  for (auto& e : x) e = dist(gen);
  return x;
}

Problem make_problem(index_t batch, index_t heads, index_t dh, std::vector<index_t> q_pos, std::vector<index_t> k_pos,
                     std::uint64_t seed) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.dh = dh;
  p.q_pos = std::move(q_pos);
  p.k_pos = std::move(k_pos);
  const auto nq = static_cast<std::size_t>(batch * heads * p.nq() * dh);
  const auto nk = static_cast<std::size_t>(batch * heads * p.nk() * dh);
  // sigma 1.5 gives peaked but not degenerate softmax rows for Dh = 8.
  p.q = random_values(nq, seed * 3 + 1, 1.5);
  p.k = random_values(nk, seed * 3 + 2, 1.5);
  p.v = random_values(nk, seed * 3 + 3, 1.0);
  return p;
}

// The same problem with its values rounded to T (so the reference sees exactly the kernel's inputs).
template <class T>
Problem rounded(Problem p) {
  for (auto* x : {&p.q, &p.k, &p.v})
    for (auto& e : *x) e = static_cast<double>(miniattn::widen(static_cast<T>(e)));
  return p;
}

template <class T>
std::vector<double> rounded(std::vector<double> x) {
  for (auto& e : x) e = static_cast<double>(miniattn::widen(static_cast<T>(e)));
  return x;
}

// Rows [first, last) of the key side of a problem (a key block as a ring would deliver it).
Problem key_block(const Problem& p, index_t first, index_t last) {
  Problem out = p;
  out.k_pos.assign(p.k_pos.begin() + first, p.k_pos.begin() + last);
  out.k.clear();
  out.v.clear();
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh) {
    for (index_t j = first; j < last; ++j) {
      for (index_t d = 0; d < p.dh; ++d) {
        out.k.push_back(p.k[static_cast<std::size_t>((bh * p.nk() + j) * p.dh + d)]);
        out.v.push_back(p.v[static_cast<std::size_t>((bh * p.nk() + j) * p.dh + d)]);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Naive float64 reference: full score matrix per (b, h), max-subtracted softmax.
struct NaiveForward {
  std::vector<double> out;  // [B, H, nq, Dh]
  std::vector<double> lse;  // [B, H, nq]
};

// The masks every comparison runs: full, causal, sliding windows causal and
// not, and packed documents (written here, independently of
// kernels::AttentionMask).
struct MaskCase {
  const char* name;
  bool causal;
  index_t window;
  bool documents = false;
};
const MaskCase kMasks[] = {{"full", false, 0},
                           {"causal", true, 0},
                           {"causal window 5", true, 5},
                           {"window 7", false, 7},
                           {"causal documents", true, 0, true},
                           {"documents window 9", false, 9, true}};
const MaskCase kCausal = kMasks[1];

// Packed documents of the tests: sample 0 starts documents at positions 11,
// 30, 31 and 45, sample 1 at 7 and 40 (positions < kDocumentPositions).
constexpr index_t kDocumentPositions = 64;
index_t test_document(index_t sample, index_t position) {
  const std::vector<index_t> starts =
      sample % 2 == 0 ? std::vector<index_t>{11, 30, 31, 45} : std::vector<index_t>{7, 40};
  return static_cast<index_t>(std::upper_bound(starts.begin(), starts.end(), position) - starts.begin());
}

bool visible(const Problem& p, const MaskCase& mask, index_t b, index_t i, index_t j) {
  const index_t q = p.q_pos[i], k = p.k_pos[j];
  if (mask.causal && k > q) return false;
  if (mask.documents && test_document(b, q) != test_document(b, k)) return false;
  return mask.window == 0 || std::abs(q - k) < mask.window;
}

miniattn::kernels::AttentionMask kernel_mask(const MaskCase& mask) {
  miniattn::kernels::AttentionMask m(mask.causal, mask.window);
  if (!mask.documents) return m;
  miniattn::View2<index_t> ids("document_ids", 2, kDocumentPositions);
  auto host = Kokkos::create_mirror_view(ids);
  for (index_t b = 0; b < 2; ++b)
    for (index_t p = 0; p < kDocumentPositions; ++p) host(b, p) = test_document(b, p);
  Kokkos::deep_copy(ids, host);
  m.documents = ids;
  return m;
}

std::vector<double> naive_scores(const Problem& p, index_t bh) {
  const index_t nq = p.nq(), nk = p.nk(), dh = p.dh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  std::vector<double> s(static_cast<std::size_t>(nq * nk));
  for (index_t i = 0; i < nq; ++i)
    for (index_t j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (index_t d = 0; d < dh; ++d)
        dot += p.q[static_cast<std::size_t>((bh * nq + i) * dh + d)] *
               p.k[static_cast<std::size_t>((bh * nk + j) * dh + d)];
      s[static_cast<std::size_t>(i * nk + j)] = scale * dot;
    }
  return s;
}

NaiveForward naive_forward(const Problem& p, const MaskCase& mask) {
  const index_t nq = p.nq(), nk = p.nk(), dh = p.dh;
  NaiveForward r;
  r.out.assign(static_cast<std::size_t>(p.batch * p.heads * nq * dh), 0.0);
  r.lse.assign(static_cast<std::size_t>(p.batch * p.heads * nq), kNegInf);
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh) {
    const auto s = naive_scores(p, bh);
    for (index_t i = 0; i < nq; ++i) {
      double m = kNegInf;
      for (index_t j = 0; j < nk; ++j)
        if (visible(p, mask, bh / p.heads, i, j)) m = std::max(m, s[static_cast<std::size_t>(i * nk + j)]);
      if (m == kNegInf) continue;  // no visible key: out = 0, lse = -inf
      double l = 0.0;
      std::vector<double> o(static_cast<std::size_t>(dh), 0.0);
      for (index_t j = 0; j < nk; ++j) {
        if (!visible(p, mask, bh / p.heads, i, j)) continue;
        const double e = std::exp(s[static_cast<std::size_t>(i * nk + j)] - m);
        l += e;
        for (index_t d = 0; d < dh; ++d)
          o[static_cast<std::size_t>(d)] += e * p.v[static_cast<std::size_t>((bh * nk + j) * dh + d)];
      }
      for (index_t d = 0; d < dh; ++d)
        r.out[static_cast<std::size_t>((bh * nq + i) * dh + d)] = o[static_cast<std::size_t>(d)] / l;
      r.lse[static_cast<std::size_t>(bh * nq + i)] = m + std::log(l);
    }
  }
  return r;
}

// Direct log(sum(exp(s))) over visible keys, no max subtraction (scores are small here).
std::vector<double> naive_logsumexp(const Problem& p, const MaskCase& mask) {
  const index_t nq = p.nq(), nk = p.nk();
  std::vector<double> lse(static_cast<std::size_t>(p.batch * p.heads * nq), kNegInf);
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh) {
    const auto s = naive_scores(p, bh);
    for (index_t i = 0; i < nq; ++i) {
      double sum = 0.0;
      for (index_t j = 0; j < nk; ++j)
        if (visible(p, mask, bh / p.heads, i, j)) sum += std::exp(s[static_cast<std::size_t>(i * nk + j)]);
      if (sum > 0.0) lse[static_cast<std::size_t>(bh * nq + i)] = std::log(sum);
    }
  }
  return lse;
}

struct Gradients {
  std::vector<double> dq, dk, dv;
};

// Analytic backward of out = softmax(scale q k^T + mask) v, written from the
// probabilities: dv = P^T g, dP = g v^T, dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q.
Gradients naive_backward(const Problem& p, const MaskCase& mask, const std::vector<double>& g) {
  const index_t nq = p.nq(), nk = p.nk(), dh = p.dh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Gradients r;
  r.dq.assign(p.q.size(), 0.0);
  r.dk.assign(p.k.size(), 0.0);
  r.dv.assign(p.v.size(), 0.0);
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh) {
    const auto s = naive_scores(p, bh);
    auto Q = [&](index_t i, index_t d) { return p.q[static_cast<std::size_t>((bh * nq + i) * dh + d)]; };
    auto K = [&](index_t j, index_t d) { return p.k[static_cast<std::size_t>((bh * nk + j) * dh + d)]; };
    auto V = [&](index_t j, index_t d) { return p.v[static_cast<std::size_t>((bh * nk + j) * dh + d)]; };
    auto G = [&](index_t i, index_t d) { return g[static_cast<std::size_t>((bh * nq + i) * dh + d)]; };
    for (index_t i = 0; i < nq; ++i) {
      // probabilities of row i
      std::vector<double> prob(static_cast<std::size_t>(nk), 0.0);
      double m = kNegInf;
      for (index_t j = 0; j < nk; ++j)
        if (visible(p, mask, bh / p.heads, i, j)) m = std::max(m, s[static_cast<std::size_t>(i * nk + j)]);
      if (m == kNegInf) continue;
      double l = 0.0;
      for (index_t j = 0; j < nk; ++j)
        if (visible(p, mask, bh / p.heads, i, j))
          l += (prob[static_cast<std::size_t>(j)] = std::exp(s[static_cast<std::size_t>(i * nk + j)] - m));
      for (auto& e : prob) e /= l;
      std::vector<double> dp(static_cast<std::size_t>(nk), 0.0);
      double row_dot = 0.0;
      for (index_t j = 0; j < nk; ++j) {
        double x = 0.0;
        for (index_t d = 0; d < dh; ++d) x += G(i, d) * V(j, d);
        dp[static_cast<std::size_t>(j)] = x;
        row_dot += prob[static_cast<std::size_t>(j)] * x;
      }
      for (index_t j = 0; j < nk; ++j) {
        const double pj = prob[static_cast<std::size_t>(j)];
        const double ds = pj * (dp[static_cast<std::size_t>(j)] - row_dot);
        for (index_t d = 0; d < dh; ++d) {
          r.dv[static_cast<std::size_t>((bh * nk + j) * dh + d)] += pj * G(i, d);
          r.dq[static_cast<std::size_t>((bh * nq + i) * dh + d)] += scale * ds * K(j, d);
          r.dk[static_cast<std::size_t>((bh * nk + j) * dh + d)] += scale * ds * Q(i, d);
        }
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------------------
// The kernel under test: the suites below are parameterised by it (the fused
// kernel with each backward schedule, and gemm), and every
// call goes through as_tested(), which keeps a case's fused tiles or turns
// them into gemm chunks of max(query_block, key_block) rows (at least 7: the
// cases' sequences of 10 to 64 rows then end in a short chunk, and 1-row
// chunks would test only the batching).
struct KernelUnderTest {
  AttentionKernel kernel;
  bool one_launch_backward;
  const char* name;
  bool cudnn_document_calls = false;  // cudnn: packed documents as calls, else on the gemm fallback
  bool widened_bf16_dot = false;      // fused, bf16: products widened to fp32 (a core without bf16 dot products)
};
const KernelUnderTest kKernels[] = {{AttentionKernel::fused, false, "fused_waves"},
                                    {AttentionKernel::fused, true, "fused_one_launch"},
                                    {AttentionKernel::gemm, false, "gemm"}};
KernelUnderTest kernel_under_test = kKernels[0];
void PrintTo(const KernelUnderTest& k, std::ostream* os) { *os << k.name; }

// On a GPU some cases' fused tiles need more team scratch than level 0 holds
// (fp64, 128 x 100): there the larger side is halved until they fit, so the
// case still runs with ragged tiles.
template <class T>
AttentionBlocking as_tested(AttentionBlocking tiles) {
  tiles.kernel = kernel_under_test.kernel;
  tiles.one_launch_backward = kernel_under_test.one_launch_backward;
  tiles.widened_bf16_dot = kernel_under_test.widened_bf16_dot;
  tiles.chunk = std::max<index_t>({tiles.query_block, tiles.key_block, 7});
  if (tiles.kernel == AttentionKernel::cudnn) {  // no tiles of its own; documents as calls or on the gemm fallback
    tiles.cudnn_document_calls = kernel_under_test.cudnn_document_calls;
    tiles.gemm_fallback = !tiles.cudnn_document_calls;
    return tiles;
  }
  for (;;) {
    miniattn::KernelConfig requested;
    requested.attention = tiles.kernel;
    requested.query_block = tiles.query_block;
    requested.key_block = tiles.key_block;
    try {
      miniattn::kernels::choose_attention_tiles<T>(requested, 8);  // the widest head of the cases
      return tiles;
    } catch (const miniattn::InputError&) {
      index_t& larger = tiles.query_block >= tiles.key_block ? tiles.query_block : tiles.key_block;
      larger = (larger + 1) / 2;
    }
  }
}

class AttentionKernels : public ::testing::TestWithParam<KernelUnderTest> {
 protected:
  void SetUp() override { kernel_under_test = GetParam(); }
};
std::string kernel_name(const ::testing::TestParamInfo<KernelUnderTest>& info) { return info.param.name; }
#define MINIATTN_KERNEL_SUITE(suite)        \
  class suite : public AttentionKernels {}; \
  INSTANTIATE_TEST_SUITE_P(Kernels, suite, ::testing::ValuesIn(kKernels), kernel_name)
MINIATTN_KERNEL_SUITE(AttentionForward);
MINIATTN_KERNEL_SUITE(AttentionBackward);
MINIATTN_KERNEL_SUITE(AttentionGroupedHeads);

template <class T>
AttentionWorkspace<T> workspace_for(const AttentionBlocking& blocking, index_t batch, index_t heads, index_t kv_heads,
                                    index_t dh, index_t nq, index_t nk) {
  AttentionWorkspace<T> workspace({batch, heads, kv_heads, dh, nq, nk}, blocking);
  if (workspace.cudnn && !workspace.cudnn->runner)  // a build without cuDNN: its host emulation
    workspace.cudnn->runner = std::make_shared<miniattn::testing::EmulatedSdpa>(blocking.deterministic);
  return workspace;
}

// ---------------------------------------------------------------------------
// Device helpers.
template <class T>
View4<T> to_device(const std::vector<double>& x, index_t b, index_t h, index_t n, index_t d, const std::string& name) {
  View4<T> view(name, b, h, n, d);
  auto host = Kokkos::create_mirror_view(view);
  std::size_t idx = 0;
  for (index_t i0 = 0; i0 < b; ++i0)
    for (index_t i1 = 0; i1 < h; ++i1)
      for (index_t i2 = 0; i2 < n; ++i2)
        for (index_t i3 = 0; i3 < d; ++i3) host(i0, i1, i2, i3) = static_cast<T>(x[idx++]);
  Kokkos::deep_copy(view, host);
  return view;
}

template <class T>
std::vector<double> to_host(const View4<T>& view) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
  std::vector<double> x;
  x.reserve(view.size());
  for (std::size_t i0 = 0; i0 < view.extent(0); ++i0)
    for (std::size_t i1 = 0; i1 < view.extent(1); ++i1)
      for (std::size_t i2 = 0; i2 < view.extent(2); ++i2)
        for (std::size_t i3 = 0; i3 < view.extent(3); ++i3) x.push_back(static_cast<double>(miniattn::widen(host(i0, i1, i2, i3))));
  return x;
}

template <class T>
std::vector<double> to_host(const View3<T>& view) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
  std::vector<double> x;
  x.reserve(view.size());
  for (std::size_t i0 = 0; i0 < view.extent(0); ++i0)
    for (std::size_t i1 = 0; i1 < view.extent(1); ++i1)
      for (std::size_t i2 = 0; i2 < view.extent(2); ++i2) x.push_back(static_cast<double>(miniattn::widen(host(i0, i1, i2))));
  return x;
}

View1<const index_t> positions_to_device(const std::vector<index_t>& pos) {
  View1<index_t> view("positions", pos.size());
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < pos.size(); ++i) host(i) = pos[i];
  Kokkos::deep_copy(view, host);
  return view;
}

// A problem on the device in precision T.
template <class T>
struct DeviceProblem {
  View4<T> q, k, v;
  View1<const index_t> q_pos, k_pos;
  explicit DeviceProblem(const Problem& p)
      : q(to_device<T>(p.q, p.batch, p.heads, p.nq(), p.dh, "q")),
        k(to_device<T>(p.k, p.batch, p.heads, p.nk(), p.dh, "k")),
        v(to_device<T>(p.v, p.batch, p.heads, p.nk(), p.dh, "v")),
        q_pos(positions_to_device(p.q_pos)),
        k_pos(positions_to_device(p.k_pos)) {}
};

struct ForwardResult {
  std::vector<double> out, lse;
};

template <class T>
ForwardResult kernel_forward(const Problem& p, const MaskCase& mask, const AttentionBlocking& tiles) {
  const AttentionBlocking blocking = as_tested<T>(tiles);
  DeviceProblem<T> d(p);
  View4<T> out("out", p.batch, p.heads, p.nq(), p.dh);
  View3<miniattn::Acc<T>> lse("lse", p.batch, p.heads, p.nq());
  View3<miniattn::Acc<T>> row_sum("row_sum", p.batch, p.heads, p.nq());
  miniattn::kernels::attention_forward<T>(d.q, d.k, d.v, {d.q_pos, d.k_pos, kernel_mask(mask), blocking}, out, lse,
                                          row_sum, workspace_for<T>(blocking, p.batch, p.heads, p.heads, p.dh, p.nq(), p.nk()));
  Kokkos::fence();
  return {to_host(out), to_host(lse)};
}

// Forward fed with several key blocks (one accumulate call per block, in the given order).
template <class T>
ForwardResult kernel_forward_blocks(const Problem& p, const std::vector<Problem>& blocks, const MaskCase& mask,
                                    const AttentionBlocking& tiles) {
  const AttentionBlocking blocking = as_tested<T>(tiles);
  DeviceProblem<T> d(p);
  View4<T> out("out", p.batch, p.heads, p.nq(), p.dh);
  View3<miniattn::Acc<T>> row_max("row_max", p.batch, p.heads, p.nq());
  View3<miniattn::Acc<T>> row_sum("row_sum", p.batch, p.heads, p.nq());
  View3<miniattn::Acc<T>> lse("lse", p.batch, p.heads, p.nq());
  // One workspace for every block (its accumulator runs across them), sized for the largest.
  index_t widest = 0;
  for (const auto& block : blocks) widest = std::max(widest, block.nk());
  const auto workspace = workspace_for<T>(blocking, p.batch, p.heads, p.heads, p.dh, p.nq(), widest);
  const auto out_acc = miniattn::kernels::accumulator_of(out, workspace);
  miniattn::kernels::attention_forward_init<miniattn::Acc<T>>(out_acc, row_max, row_sum);
  for (const auto& block : blocks) {
    DeviceProblem<T> kb(block);
    miniattn::kernels::attention_forward_accumulate<T>(d.q, kb.k, kb.v,
                                                       {d.q_pos, kb.k_pos, kernel_mask(mask), blocking}, out_acc,
                                                       row_max, row_sum, workspace);
  }
  miniattn::kernels::attention_forward_finalize<T>(out_acc, row_max, row_sum, lse, out);
  Kokkos::fence();
  return {to_host(out), to_host(lse)};
}

// Kernel backward for dout = g, with the keys fed in the given blocks (dk, dv concatenated back).
template <class T>
Gradients kernel_backward(const Problem& p, const std::vector<Problem>& blocks, const MaskCase& mask,
                          const AttentionBlocking& tiles, const std::vector<double>& g) {
  const AttentionBlocking blocking = as_tested<T>(tiles);
  DeviceProblem<T> d(p);
  View4<T> out("out", p.batch, p.heads, p.nq(), p.dh);
  View3<miniattn::Acc<T>> lse("lse", p.batch, p.heads, p.nq());
  View3<miniattn::Acc<T>> row_sum("row_sum", p.batch, p.heads, p.nq());
  miniattn::kernels::attention_forward<T>(d.q, d.k, d.v, {d.q_pos, d.k_pos, kernel_mask(mask), blocking}, out, lse,
                                          row_sum, workspace_for<T>(blocking, p.batch, p.heads, p.heads, p.dh, p.nq(), p.nk()));
  View4<T> dout = to_device<T>(g, p.batch, p.heads, p.nq(), p.dh, "dout");
  View3<miniattn::Acc<T>> delta("delta", p.batch, p.heads, p.nq());
  miniattn::kernels::attention_backward_delta<T>(out, dout, delta);
  View4<T> dq("dq", p.batch, p.heads, p.nq(), p.dh);
  Gradients r;
  std::vector<std::vector<double>> dk_blocks, dv_blocks;
  index_t widest = 0;
  for (const auto& block : blocks) widest = std::max(widest, block.nk());
  const auto workspace = workspace_for<T>(blocking, p.batch, p.heads, p.heads, p.dh, p.nq(), widest);
  const auto dq_acc = miniattn::kernels::accumulator_of(dq, workspace);
  Kokkos::deep_copy(dq_acc, miniattn::Acc<T>(0));
  for (const auto& block : blocks) {
    DeviceProblem<T> kb(block);
    View4<T> dk("dk", p.batch, p.heads, block.nk(), p.dh);
    View4<T> dv("dv", p.batch, p.heads, block.nk(), p.dh);
    miniattn::kernels::attention_backward_accumulate<T>(d.q, kb.k, kb.v, out, dout, lse, delta,
                                                        {d.q_pos, kb.k_pos, kernel_mask(mask), blocking}, dq_acc, dk,
                                                        dv, workspace);
    dk_blocks.push_back(to_host(dk));
    dv_blocks.push_back(to_host(dv));
  }
  miniattn::kernels::round_accumulator<T>(dq_acc, dq);
  Kokkos::fence();
  r.dq = to_host(dq);
  // Re-interleave the per-block [B, H, n_block, Dh] arrays into [B, H, nk, Dh].
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh)
    for (std::size_t blk = 0; blk < blocks.size(); ++blk) {
      const auto rows = static_cast<std::size_t>(blocks[blk].nk() * p.dh);
      const auto first = static_cast<std::size_t>(bh) * rows;
      r.dk.insert(r.dk.end(), dk_blocks[blk].begin() + first, dk_blocks[blk].begin() + first + rows);
      r.dv.insert(r.dv.end(), dv_blocks[blk].begin() + first, dv_blocks[blk].begin() + first + rows);
    }
  return r;
}

// ---------------------------------------------------------------------------
// max |a - b| / max |b|; -inf must meet -inf exactly; NaN anywhere is an infinite error.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    norm = std::max(norm, std::fabs(b[i]));
  }
  return norm > 0.0 ? diff / norm : diff;
}

template <class T>
constexpr double forward_tolerance() {
  return std::is_same<T, double>::value ? 1e-12 : 1e-5;
}

// ---------------------------------------------------------------------------
// Test configurations.
struct Case {
  std::string name;
  std::vector<index_t> q_pos, k_pos;
  AttentionBlocking blocking;
  index_t dh = 8;  // head width; 5 exercises the remainder of loops unrolled by four
};

std::vector<Case> forward_cases() {
  const auto zigzag_q = concat(range_positions(0, 8), range_positions(56, 64));
  return {
      {"n64_blocks16x16", range_positions(0, 64), range_positions(0, 64), {16, 16}},
      {"n50_ragged16x12", range_positions(0, 50), range_positions(0, 50), {16, 12}},
      {"n50_blocks_larger_than_n", range_positions(0, 50), range_positions(0, 50), {128, 100}},
      {"n50_blocks1x1", range_positions(0, 50), range_positions(0, 50), {1, 1}},
      {"n50_ragged16x12_dh5", range_positions(0, 50), range_positions(0, 50), {16, 12}, 5},
      {"n37_ragged8x7_dh5", range_positions(0, 37), range_positions(0, 37), {8, 7}, 5},
      {"queries_after_keys", range_positions(32, 64), range_positions(0, 32), {16, 12}},
      {"zigzag_queries", zigzag_q, range_positions(0, 64), {16, 12}},
      {"zigzag_queries_small_tiles", zigzag_q, range_positions(0, 64), {4, 12}},
      {"zigzag_keys", range_positions(0, 64), concat(range_positions(0, 8), range_positions(56, 64)), {12, 5}},
      {"keys_after_some_queries", range_positions(0, 40), range_positions(16, 48), {8, 8}},
  };
}

template <class T>
void check_forward_against_naive() {
  std::uint64_t seed = 11;
  for (const auto& c : forward_cases()) {
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(c.name + " " + mask.name);
      const Problem p = rounded<T>(make_problem(2, 3, c.dh, c.q_pos, c.k_pos, seed++));
      const auto ref = naive_forward(p, mask);
      const auto got = kernel_forward<T>(p, mask, c.blocking);
      EXPECT_LE(relative_error(got.out, ref.out), forward_tolerance<T>());
      EXPECT_LE(relative_error(got.lse, ref.lse), forward_tolerance<T>());
    }
  }
}

TEST_P(AttentionForward, MatchesNaiveFloat64) { check_forward_against_naive<double>(); }
TEST_P(AttentionForward, MatchesNaiveFloat32) { check_forward_against_naive<float>(); }

// The reference really distinguishes the masks and the test can fail: each
// mask's kernel result differs from every other mask's reference.
TEST_P(AttentionForward, EveryMaskChangesTheResult) {
  const Problem p = make_problem(2, 3, 8, range_positions(0, 50), range_positions(0, 50), 5);
  for (const MaskCase& mask : kMasks) {
    const auto got = kernel_forward<double>(p, mask, {16, 12});
    for (const MaskCase& other : kMasks) {
      SCOPED_TRACE(std::string(mask.name) + " against " + other.name);
      if (&other != &mask) {
        EXPECT_GT(relative_error(got.out, naive_forward(p, other).out), 1e-3);
      }
    }
  }
}

template <class T>
void check_lse_against_logsumexp() {
  std::uint64_t seed = 101;
  for (const auto& c : forward_cases()) {
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(c.name + " " + mask.name);
      const Problem p = rounded<T>(make_problem(2, 3, c.dh, c.q_pos, c.k_pos, seed++));
      const auto got = kernel_forward<T>(p, mask, c.blocking);
      const double tolerance = std::is_same<T, double>::value ? 1e-12 : 1e-6;
      EXPECT_LE(relative_error(got.lse, naive_logsumexp(p, mask)), tolerance);
    }
  }
}

TEST_P(AttentionForward, LseIsLogSumExpFloat64) { check_lse_against_logsumexp<double>(); }
TEST_P(AttentionForward, LseIsLogSumExpFloat32) { check_lse_against_logsumexp<float>(); }

// ---------------------------------------------------------------------------
// Ring attention feeds the keys block by block: two accumulate calls, in
// either order, must equal one call over all keys.
template <class T>
void check_two_key_blocks() {
  struct Split {
    std::string name;
    std::vector<index_t> q_pos, k_pos;
    index_t split;
  };
  const std::vector<Split> splits = {
      // Causal: keys 24..63 are all in the future of query rows 0..23.
      {"contiguous", range_positions(0, 64), range_positions(0, 64), 24},
      {"zigzag_queries", concat(range_positions(0, 8), range_positions(56, 64)), range_positions(0, 64), 32},
      {"queries_after_keys", range_positions(32, 64), range_positions(0, 32), 13},
  };
  const AttentionBlocking blocking{16, 12};
  std::uint64_t seed = 201;
  for (const auto& s : splits) {
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(s.name + " " + mask.name);
      const Problem p = rounded<T>(make_problem(2, 3, 8, s.q_pos, s.k_pos, seed++));
      const Problem first = key_block(p, 0, s.split);
      const Problem second = key_block(p, s.split, p.nk());
      const auto whole = kernel_forward<T>(p, mask, blocking);
      const auto forward_order = kernel_forward_blocks<T>(p, {first, second}, mask, blocking);
      const auto reverse_order = kernel_forward_blocks<T>(p, {second, first}, mask, blocking);
      const double tol = forward_tolerance<T>();
      EXPECT_LE(relative_error(forward_order.out, whole.out), tol);
      EXPECT_LE(relative_error(forward_order.lse, whole.lse), tol);
      EXPECT_LE(relative_error(reverse_order.out, whole.out), tol);
      EXPECT_LE(relative_error(reverse_order.lse, whole.lse), tol);
      const auto ref = naive_forward(p, mask);
      EXPECT_LE(relative_error(reverse_order.out, ref.out), tol);
      EXPECT_LE(relative_error(reverse_order.lse, ref.lse), tol);
    }
  }
}

TEST_P(AttentionForward, TwoKeyBlocksEqualOneCallFloat64) { check_two_key_blocks<double>(); }
TEST_P(AttentionForward, TwoKeyBlocksEqualOneCallFloat32) { check_two_key_blocks<float>(); }

// ---------------------------------------------------------------------------
// Causal work skipping: a query tile entirely before every key sees nothing.
TEST_P(AttentionForward, QueriesBeforeAllKeysGiveZeroAndMinusInfinity) {
  const Problem p = make_problem(1, 2, 8, range_positions(0, 16), range_positions(16, 48), 7);
  for (const AttentionBlocking blocking : {AttentionBlocking{8, 8}, AttentionBlocking{64, 64}}) {
    const auto got = kernel_forward<double>(p, kCausal, blocking);
    for (double x : got.out) EXPECT_EQ(x, 0.0);
    for (double x : got.lse) EXPECT_EQ(x, kNegInf);
    // Backward through such rows contributes nothing and makes no NaN.
    const auto g = random_values(p.q.size(), 8);
    const auto grads = kernel_backward<double>(p, {p}, kCausal, blocking, g);
    for (const auto* x : {&grads.dq, &grads.dk, &grads.dv})
      for (double e : *x) EXPECT_EQ(e, 0.0);
  }
  // Mixed: the first query tile precedes every key, later ones do not; with
  // 12-row tiles, rows 12..15 share a tile with rows that do see keys.
  const Problem mixed = make_problem(1, 2, 8, range_positions(0, 40), range_positions(16, 48), 9);
  for (const AttentionBlocking blocking : {AttentionBlocking{8, 8}, AttentionBlocking{12, 8}}) {
    const auto got = kernel_forward<double>(mixed, kCausal, blocking);
    const auto ref = naive_forward(mixed, kCausal);
    EXPECT_LE(relative_error(got.out, ref.out), 1e-12);
    EXPECT_LE(relative_error(got.lse, ref.lse), 1e-12);
    EXPECT_EQ(got.lse[0], kNegInf);
    EXPECT_EQ(got.lse[15], kNegInf);
    EXPECT_TRUE(std::isfinite(got.lse[16]));
    EXPECT_TRUE(std::isfinite(got.lse[39]));
    const auto g = random_values(mixed.q.size(), 10);
    const auto grads = kernel_backward<double>(mixed, {mixed}, kCausal, blocking, g);
    const auto ref_grads = naive_backward(mixed, kCausal, g);
    EXPECT_LE(relative_error(grads.dq, ref_grads.dq), 1e-12);
    EXPECT_LE(relative_error(grads.dk, ref_grads.dk), 1e-12);
    EXPECT_LE(relative_error(grads.dv, ref_grads.dv), 1e-12);
  }
}

// The running state between accumulate calls: a row that has seen no unmasked
// key keeps row_max = -inf, row_sum = 0 and out_acc = 0 (what a ring relies on).
TEST_P(AttentionForward, RowsWithoutKeysKeepMinusInfinityState) {
  const Problem p = make_problem(1, 2, 8, range_positions(0, 24), range_positions(16, 40), 21);
  DeviceProblem<double> d(p);
  View4<double> acc("acc", 1, 2, 24, 8);
  View3<double> row_max("row_max", 1, 2, 24), row_sum("row_sum", 1, 2, 24);
  miniattn::kernels::attention_forward_init<double>(acc, row_max, row_sum);
  const AttentionBlocking blocking = as_tested<double>({12, 8});
  miniattn::kernels::attention_forward_accumulate<double>(d.q, d.k, d.v, {d.q_pos, d.k_pos, true, blocking}, acc,
                                                          row_max, row_sum,
                                                          workspace_for<double>(blocking, 1, 2, 2, 8, 24, 24));
  const auto m = to_host(row_max), l = to_host(row_sum), o = to_host(acc);
  for (index_t h = 0; h < 2; ++h) {
    for (index_t i = 0; i < 24; ++i) {
      const auto row = static_cast<std::size_t>(h * 24 + i);
      if (i < 16) {
        EXPECT_EQ(m[row], kNegInf) << "row " << i;
        EXPECT_EQ(l[row], 0.0) << "row " << i;
        for (index_t dd = 0; dd < 8; ++dd) EXPECT_EQ(o[row * 8 + static_cast<std::size_t>(dd)], 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(m[row])) << "row " << i;
        EXPECT_GE(l[row], 1.0) << "row " << i;  // the row maximum contributes exp(0) = 1
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Backward against the naive analytic backward.
template <class T>
void check_backward_against_naive(double tolerance) {
  std::uint64_t seed = 301;
  for (const auto& c : forward_cases()) {
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(c.name + " " + mask.name);
      const Problem p = rounded<T>(make_problem(2, 3, c.dh, c.q_pos, c.k_pos, seed));
      const auto g = rounded<T>(random_values(p.q.size(), seed + 1000));
      ++seed;
      const auto ref = naive_backward(p, mask, g);
      const auto got = kernel_backward<T>(p, {p}, mask, c.blocking, g);
      EXPECT_LE(relative_error(got.dq, ref.dq), tolerance);
      EXPECT_LE(relative_error(got.dk, ref.dk), tolerance);
      EXPECT_LE(relative_error(got.dv, ref.dv), tolerance);
    }
  }
}

TEST_P(AttentionBackward, MatchesNaiveFloat64) { check_backward_against_naive<double>(1e-12); }
TEST_P(AttentionBackward, MatchesNaiveFloat32) { check_backward_against_naive<float>(1e-5); }

// Backward fed with two key blocks (either order) equals one call.
TEST_P(AttentionBackward, TwoKeyBlocksEqualOneCall) {
  const AttentionBlocking blocking{16, 12};
  std::uint64_t seed = 401;
  for (const MaskCase& mask : kMasks) {
    SCOPED_TRACE(mask.name);
    const Problem p = make_problem(2, 3, 8, range_positions(0, 50), range_positions(0, 50), seed++);
    const auto g = random_values(p.q.size(), seed + 1000);
    const Problem first = key_block(p, 0, 20);
    const Problem second = key_block(p, 20, 50);
    const auto whole = kernel_backward<double>(p, {p}, mask, blocking, g);
    const auto split = kernel_backward<double>(p, {first, second}, mask, blocking, g);
    const auto ref = naive_backward(p, mask, g);
    EXPECT_LE(relative_error(split.dq, whole.dq), 1e-12);
    EXPECT_LE(relative_error(split.dk, whole.dk), 1e-12);
    EXPECT_LE(relative_error(split.dv, whole.dv), 1e-12);
    EXPECT_LE(relative_error(split.dq, ref.dq), 1e-12);
    EXPECT_LE(relative_error(split.dk, ref.dk), 1e-12);
    EXPECT_LE(relative_error(split.dv, ref.dv), 1e-12);
  }
}

// Backward accumulates (+=) into dq, dk, dv rather than overwriting them.
TEST_P(AttentionBackward, Accumulates) {
  const Problem p = make_problem(1, 2, 8, range_positions(0, 20), range_positions(0, 20), 17);
  const auto g = random_values(p.q.size(), 18);
  DeviceProblem<double> d(p);
  View4<double> out("out", 1, 2, 20, 8), dout = to_device<double>(g, 1, 2, 20, 8, "dout");
  View3<double> lse("lse", 1, 2, 20), row_sum("row_sum", 1, 2, 20), delta("delta", 1, 2, 20);
  const AttentionBlocking blocking = as_tested<double>({8, 8});
  const auto workspace = workspace_for<double>(blocking, 1, 2, 2, 8, 20, 20);
  miniattn::kernels::attention_forward<double>(d.q, d.k, d.v, {d.q_pos, d.k_pos, true, blocking}, out, lse, row_sum,
                                               workspace);
  miniattn::kernels::attention_backward_delta<double>(out, dout, delta);
  View4<double> dq("dq", 1, 2, 20, 8), dk("dk", 1, 2, 20, 8), dv("dv", 1, 2, 20, 8);
  Kokkos::deep_copy(dq, 1.0);
  Kokkos::deep_copy(dk, 2.0);
  Kokkos::deep_copy(dv, 3.0);
  miniattn::kernels::attention_backward_accumulate<double>(d.q, d.k, d.v, out, dout, lse, delta,
                                                           {d.q_pos, d.k_pos, true, blocking}, dq, dk, dv, workspace);
  const auto ref = naive_backward(p, kCausal, g);
  auto shifted = [](std::vector<double> x, double c) {
    for (auto& e : x) e += c;
    return x;
  };
  EXPECT_LE(relative_error(to_host(dq), shifted(ref.dq, 1.0)), 1e-12);
  EXPECT_LE(relative_error(to_host(dk), shifted(ref.dk, 2.0)), 1e-12);
  EXPECT_LE(relative_error(to_host(dv), shifted(ref.dv, 3.0)), 1e-12);
}

// Central finite differences of L = sum(out * G) with the kernel forward.
TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const AttentionBlocking blocking{4, 3};
  std::uint64_t seed = 501;
  for (const auto& positions :
       {std::make_pair(range_positions(0, 10), range_positions(0, 10)),
        std::make_pair(concat(range_positions(0, 3), range_positions(13, 16)), range_positions(0, 16))}) {
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(std::string(mask.name) + " nq=" + std::to_string(positions.first.size()));
      const Problem p = make_problem(1, 2, 5, positions.first, positions.second, seed++);
      const auto g = random_values(p.q.size(), seed + 1000);
      auto loss = [&](const Problem& x) {
        const auto f = kernel_forward<double>(x, mask, blocking);
        double l = 0.0;
        for (std::size_t i = 0; i < g.size(); ++i) l += f.out[i] * g[i];
        return l;
      };
      const auto analytic = kernel_backward<double>(p, {p}, mask, blocking, g);
      const double eps = 1e-5;
      auto finite_difference = [&](std::vector<double> Problem::*member) {
        std::vector<double> fd((p.*member).size());
        for (std::size_t i = 0; i < fd.size(); ++i) {
          Problem plus = p, minus = p;
          (plus.*member)[i] += eps;
          (minus.*member)[i] -= eps;
          fd[i] = (loss(plus) - loss(minus)) / (2 * eps);
        }
        return fd;
      };
      EXPECT_LE(relative_error(analytic.dq, finite_difference(&Problem::q)), 1e-6);
      EXPECT_LE(relative_error(analytic.dk, finite_difference(&Problem::k)), 1e-6);
      EXPECT_LE(relative_error(analytic.dv, finite_difference(&Problem::v)), 1e-6);
    }
  }
}

// ---------------------------------------------------------------------------
// Grouped K/V heads (GQA / MQA): the kernels given KV K/V heads equal the naive
// reference on the same problem with each K/V head written out for every query
// head of its group (h uses h / (H / KV)); the reference's dK, dV summed over
// the group are the kernel's.
struct GroupedProblem {
  Problem whole;             // H heads on both sides, K/V repeated within each group
  std::vector<double> k, v;  // [B, KV, nk, Dh]: what the kernels get
  index_t kv_heads = 0;
};

GroupedProblem make_grouped_problem(index_t heads, index_t kv_heads, const Case& c, std::uint64_t seed) {
  GroupedProblem g;
  g.kv_heads = kv_heads;
  g.whole = make_problem(2, heads, c.dh, c.q_pos, c.k_pos, seed);
  const Problem compact = make_problem(2, kv_heads, c.dh, c.q_pos, c.k_pos, seed + 7);
  g.k = compact.k;
  g.v = compact.v;
  const std::size_t row = static_cast<std::size_t>(g.whole.nk() * c.dh);
  for (index_t b = 0; b < 2; ++b)
    for (index_t h = 0; h < heads; ++h) {
      const std::size_t from = static_cast<std::size_t>(b * kv_heads + h / (heads / kv_heads)) * row;
      const std::size_t to = static_cast<std::size_t>(b * heads + h) * row;
      std::copy(compact.k.begin() + from, compact.k.begin() + from + row, g.whole.k.begin() + to);
      std::copy(compact.v.begin() + from, compact.v.begin() + from + row, g.whole.v.begin() + to);
    }
  return g;
}

// x [B, H, nk, Dh] -> [B, KV, nk, Dh], each K/V head the sum of its group's heads.
std::vector<double> sum_over_groups(const std::vector<double>& x, index_t heads, index_t kv_heads, std::size_t row) {
  std::vector<double> sum(x.size() / static_cast<std::size_t>(heads / kv_heads), 0.0);
  const index_t batch = static_cast<index_t>(x.size() / (row * static_cast<std::size_t>(heads)));
  for (index_t b = 0; b < batch; ++b)
    for (index_t h = 0; h < heads; ++h)
      for (std::size_t e = 0; e < row; ++e)
        sum[static_cast<std::size_t>(b * kv_heads + h / (heads / kv_heads)) * row + e] +=
            x[static_cast<std::size_t>(b * heads + h) * row + e];
  return sum;
}

// The kernels' forward and backward on a grouped problem (dq through its
// accumulator, as attention_backward_accumulate takes it), on the host.
template <class T>
std::pair<ForwardResult, Gradients> kernel_grouped(const GroupedProblem& gp, const MaskCase& mask,
                                                   const AttentionBlocking& tiles, const std::vector<double>& g) {
  const Problem& p = gp.whole;
  const index_t heads = p.heads, kv_heads = gp.kv_heads, nq = p.nq(), nk = p.nk(), B = p.batch;
  const View4<T> q = to_device<T>(p.q, B, heads, nq, p.dh, "q");
  const View4<T> k = to_device<T>(gp.k, B, kv_heads, nk, p.dh, "k");
  const View4<T> v = to_device<T>(gp.v, B, kv_heads, nk, p.dh, "v");
  const View1<const index_t> q_pos = positions_to_device(p.q_pos), k_pos = positions_to_device(p.k_pos);
  View4<T> out("out", B, heads, nq, p.dh), dq("dq", B, heads, nq, p.dh);
  View4<T> dk("dk", B, kv_heads, nk, p.dh), dv("dv", B, kv_heads, nk, p.dh);
  View3<miniattn::Acc<T>> lse("lse", B, heads, nq), row_sum("row_sum", B, heads, nq), delta("delta", B, heads, nq);
  const AttentionBlocking blocking = as_tested<T>(tiles);
  const auto workspace = workspace_for<T>(blocking, B, heads, kv_heads, p.dh, nq, nk);
  const miniattn::kernels::AttentionScope scope{q_pos, k_pos, kernel_mask(mask), blocking};
  miniattn::kernels::attention_forward<T>(q, k, v, scope, out, lse, row_sum, workspace);
  const View4<T> dout = to_device<T>(g, B, heads, nq, p.dh, "dout");
  miniattn::kernels::attention_backward_delta<T>(out, dout, delta);
  const auto dq_acc = miniattn::kernels::accumulator_of(dq, workspace);
  Kokkos::deep_copy(dq_acc, miniattn::Acc<T>(0));
  miniattn::kernels::attention_backward_accumulate<T>(q, k, v, out, dout, lse, delta, scope, dq_acc, dk, dv,
                                                      workspace);
  miniattn::kernels::round_accumulator<T>(dq_acc, dq);
  Kokkos::fence();
  return {{to_host(out), to_host(lse)}, {to_host(dq), to_host(dk), to_host(dv)}};
}

template <class T>
void check_grouped_heads_against_naive(double tolerance) {
  std::uint64_t seed = 701;
  for (const auto& [heads, kv_heads] : {std::make_pair(4, 2), std::make_pair(6, 3), std::make_pair(4, 1)}) {
    for (const auto& c : forward_cases()) {
      for (const MaskCase& mask : kMasks) {
        SCOPED_TRACE(c.name + " " + mask.name + " H=" + std::to_string(heads) + " KV=" + std::to_string(kv_heads));
        GroupedProblem gp = make_grouped_problem(heads, kv_heads, c, seed++);
        const Problem& p = gp.whole;
        const auto g = random_values(p.q.size(), seed + 1000);
        const auto [got, grads] = kernel_grouped<T>(gp, mask, c.blocking, g);
        const Problem reference = rounded<T>(p);
        const auto ref = naive_forward(reference, mask);
        const auto ref_grads = naive_backward(reference, mask, rounded<T>(g));
        const std::size_t row = static_cast<std::size_t>(p.nk() * p.dh);
        EXPECT_LE(relative_error(got.out, ref.out), tolerance);
        EXPECT_LE(relative_error(got.lse, ref.lse), tolerance);
        EXPECT_LE(relative_error(grads.dq, ref_grads.dq), tolerance);
        EXPECT_LE(relative_error(grads.dk, sum_over_groups(ref_grads.dk, heads, kv_heads, row)), tolerance);
        EXPECT_LE(relative_error(grads.dv, sum_over_groups(ref_grads.dv, heads, kv_heads, row)), tolerance);
      }
    }
  }
}

TEST_P(AttentionGroupedHeads, MatchesNaiveFloat64) { check_grouped_heads_against_naive<double>(1e-12); }
TEST_P(AttentionGroupedHeads, MatchesNaiveFloat32) { check_grouped_heads_against_naive<float>(1e-5); }

}  // namespace

namespace {

// ---------------------------------------------------------------------------
// bf16 (every kernel that computes it: bf16_kernels() below), judged as
// FlashAttention's tests judge low precision: against the float64 reference on
// the same bf16-rounded inputs, the kernel's error must stay within a small
// multiple of the error of a plain bf16 implementation (what PyTorch's eager
// bf16 attention does: every matmul and softmax output rounded to bf16, fp32
// inside) on the same inputs - 2x for the output and lse, 3x for gradients,
// FlashAttention's factors - plus 1e-4 for ties of tiny errors.

double to_bf16(double x) { return static_cast<double>(static_cast<float>(miniattn::bf16(static_cast<float>(x)))); }

struct PlainBf16 {
  NaiveForward forward;
  Gradients grads;
};

// Plain bf16 attention of one problem: S = bf16(bf16(Q K^T) * scale), P =
// bf16(softmax(S)), O = bf16(P V); dV = bf16(P^T dO), dP = bf16(dO V^T),
// dS = bf16(P (dP - rowsum(P dP))), dQ = bf16(bf16(dS K) * scale), dK likewise.
PlainBf16 plain_bf16_attention(const Problem& p, const MaskCase& mask, const std::vector<double>& g) {
  const index_t nq = p.nq(), nk = p.nk(), dh = p.dh;
  const double scale = to_bf16(1.0 / std::sqrt(static_cast<double>(dh)));
  PlainBf16 r;
  r.forward.out.assign(p.q.size(), 0.0);
  r.forward.lse.assign(static_cast<std::size_t>(p.batch * p.heads * nq), kNegInf);
  r.grads = {std::vector<double>(p.q.size(), 0.0), std::vector<double>(p.k.size(), 0.0),
             std::vector<double>(p.v.size(), 0.0)};
  std::vector<double> dk_sum(p.k.size(), 0.0), dv_sum(p.v.size(), 0.0);
  for (index_t bh = 0; bh < p.batch * p.heads; ++bh) {
    const auto at = [&](const std::vector<double>& x, index_t rows, index_t i, index_t d) {
      return x[static_cast<std::size_t>((bh * rows + i) * dh + d)];
    };
    const auto raw = naive_scores(p, bh);  // scale * Q K^T in double
    for (index_t i = 0; i < nq; ++i) {
      std::vector<double> prob(static_cast<std::size_t>(nk), 0.0), s(static_cast<std::size_t>(nk), kNegInf);
      double m = kNegInf;
      for (index_t j = 0; j < nk; ++j) {
        if (!visible(p, mask, bh / p.heads, i, j)) continue;
        s[j] = to_bf16(to_bf16(raw[static_cast<std::size_t>(i * nk + j)] / (1.0 / std::sqrt(double(dh)))) * scale);
        m = std::max(m, s[j]);
      }
      if (m == kNegInf) continue;
      double l = 0.0;
      for (index_t j = 0; j < nk; ++j)
        if (s[j] != kNegInf) l += std::exp(s[j] - m);
      r.forward.lse[static_cast<std::size_t>(bh * nq + i)] = m + std::log(l);
      for (index_t j = 0; j < nk; ++j) prob[j] = s[j] == kNegInf ? 0.0 : to_bf16(std::exp(s[j] - m) / l);
      std::vector<double> dp(static_cast<std::size_t>(nk), 0.0);
      double row_dot = 0.0;
      for (index_t d = 0; d < dh; ++d) {
        double o = 0.0;
        for (index_t j = 0; j < nk; ++j) o += prob[j] * at(p.v, nk, j, d);
        r.forward.out[static_cast<std::size_t>((bh * nq + i) * dh + d)] = to_bf16(o);
      }
      for (index_t j = 0; j < nk; ++j) {
        double x = 0.0;
        for (index_t d = 0; d < dh; ++d) x += at(g, nq, i, d) * at(p.v, nk, j, d);
        dp[j] = to_bf16(x);
        row_dot += prob[j] * dp[j];
      }
      for (index_t j = 0; j < nk; ++j) {
        const double ds = to_bf16(prob[j] * (dp[j] - row_dot));
        for (index_t d = 0; d < dh; ++d) {
          r.grads.dq[static_cast<std::size_t>((bh * nq + i) * dh + d)] += ds * at(p.k, nk, j, d);
          dk_sum[static_cast<std::size_t>((bh * nk + j) * dh + d)] += ds * at(p.q, nq, i, d);
          dv_sum[static_cast<std::size_t>((bh * nk + j) * dh + d)] += prob[j] * at(g, nq, i, d);
        }
      }
    }
  }
  for (auto& x : r.grads.dq) x = to_bf16(to_bf16(x) * scale);
  for (std::size_t e = 0; e < dk_sum.size(); ++e) {
    r.grads.dk[e] = to_bf16(to_bf16(dk_sum[e]) * scale);
    r.grads.dv[e] = to_bf16(dv_sum[e]);
  }
  return r;
}

// bf16 kernels: gemm on every backend; fused on host backends, on the core's
// bf16 dot products and widened to fp32 (fused_widened: a core without them);
// cudnn runs cuDNN where the build has
// it, else its host emulation (sdpa_emulation.hpp): the planner, the merges
// and the gemm fallback are the kernel's own either way. Packed documents go
// to the gemm fallback (cudnn) or run as calls of one sample and document
// each (cudnn_document_calls).
std::vector<KernelUnderTest> bf16_kernels() {
  std::vector<KernelUnderTest> kernels = {{AttentionKernel::gemm, false, "gemm"},
                                          {AttentionKernel::cudnn, false, "cudnn"},
                                          {AttentionKernel::cudnn, false, "cudnn_document_calls", true}};
  if (miniattn::kHostExecution) {
    kernels.push_back({AttentionKernel::fused, false, "fused"});
    kernels.push_back({AttentionKernel::fused, false, "fused_widened", false, true});
  }
  return kernels;
}
class AttentionBf16 : public AttentionKernels {};
INSTANTIATE_TEST_SUITE_P(Kernels, AttentionBf16, ::testing::ValuesIn(bf16_kernels()), kernel_name);

// FlashAttention's rule: a bf16 kernel's error against float64 within
// `factor` (2 forward, 3 backward) of plain bf16 attention's, 1e-4 absolute
// slack; the worst ratio is kept for the printout.
struct PlainBf16Rule {
  double worst_ratio = 0.0;
  void check(const std::vector<double>& x, const std::vector<double>& plain_x, const std::vector<double>& exact,
             double factor, const char* what) {
    const double err = relative_error(x, exact), plain_err = relative_error(plain_x, exact);
    EXPECT_LE(err, factor * plain_err + 1e-4) << what << ": plain bf16 " << plain_err;
    worst_ratio = std::max(worst_ratio, err / (plain_err + 1e-4));
  }
  // out (and lse, where given) by 2, the gradients by 3.
  void check_all(const ForwardResult& got, const Gradients& grads, const PlainBf16& plain, const NaiveForward& ref,
                 const Gradients& ref_grads) {
    check(got.out, plain.forward.out, ref.out, 2.0, "out");
    if (!got.lse.empty()) check(got.lse, plain.forward.lse, ref.lse, 2.0, "lse");
    check(grads.dq, plain.grads.dq, ref_grads.dq, 3.0, "dq");
    check(grads.dk, plain.grads.dk, ref_grads.dk, 3.0, "dk");
    check(grads.dv, plain.grads.dv, ref_grads.dv, 3.0, "dv");
  }
};

TEST_P(AttentionBf16, WithinFlashAttentionsFactorsOfPlainBf16) {
  using miniattn::bf16;
  const bool cudnn = GetParam().kernel == AttentionKernel::cudnn;  // head widths a multiple of 8
  std::uint64_t seed = 901;
  PlainBf16Rule rule;
  for (const auto& c : forward_cases()) {
    const index_t dh = cudnn ? 8 : c.dh;
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(c.name + " " + mask.name + " dh " + std::to_string(dh));
      const Problem p = rounded<bf16>(make_problem(2, 3, dh, c.q_pos, c.k_pos, seed));
      const auto g = rounded<bf16>(random_values(p.q.size(), seed + 1000));
      ++seed;
      const auto ref = naive_forward(p, mask);
      const auto ref_grads = naive_backward(p, mask, g);
      const PlainBf16 plain = plain_bf16_attention(p, mask, g);
      rule.check_all(kernel_forward<bf16>(p, mask, c.blocking), kernel_backward<bf16>(p, {p}, mask, c.blocking, g),
                     plain, ref, ref_grads);
    }
  }
  std::printf("bf16 %s kernel: worst error / (plain bf16 error + 1e-4) = %.2f\n", GetParam().name,
              rule.worst_ratio);
}

// Sharp heads, scores of tens (a head that picks one key among many, as the
// copy task's does): a score rounded to bf16 moves by up to 2^-9 of its size,
// its probability by several percent. The kernels keep S (and dP) in fp32 and
// round P and dS only, so their output and gradients stay well inside the
// error of plain bf16, which rounds S; a kernel that rounds S lands near it.
TEST_P(AttentionBf16, SharpScoresKeepFp32Precision) {
  using miniattn::bf16;
  const index_t dh = 16;
  Problem sharp = make_problem(2, 3, dh, range_positions(0, 96), range_positions(0, 96), 4242);
  for (double& x : sharp.q) x *= 6;  // scores of standard deviation 13.5
  const Problem p = rounded<bf16>(sharp);
  const auto g = rounded<bf16>(random_values(p.q.size(), 4243));
  for (const MaskCase& mask : {kMasks[0], kCausal}) {
    SCOPED_TRACE(mask.name);
    const AttentionBlocking blocking{32, 32};  // gemm: chunks of 32 rows, three of them
    const auto ref = naive_forward(p, mask);
    const auto ref_grads = naive_backward(p, mask, g);
    const PlainBf16 plain = plain_bf16_attention(p, mask, g);
    const auto got = kernel_forward<bf16>(p, mask, blocking);
    const auto grads = kernel_backward<bf16>(p, {p}, mask, blocking, g);
    const auto check = [&](const std::vector<double>& x, const std::vector<double>& plain_x,
                           const std::vector<double>& exact, const char* what) {
      const double err = relative_error(x, exact), plain_err = relative_error(plain_x, exact);
      EXPECT_LT(err, 0.5 * plain_err) << what;
      std::printf("sharp scores, %s, %s: %s error %.2e, plain bf16 %.2e\n", GetParam().name, mask.name, what, err,
                  plain_err);
    };
    check(got.out, plain.forward.out, ref.out, "out");
    check(grads.dq, plain.grads.dq, ref_grads.dq, "dq");
    check(grads.dk, plain.grads.dk, ref_grads.dk, "dk");
    check(grads.dv, plain.grads.dv, ref_grads.dv, "dv");
  }
}

// A block's keys in two calls, as a ring feeds them, within the bf16 rule of
// the whole sequence: the forward in either order, the backward's dq summed
// over both calls, with queries that see none of one call's keys (causal).
TEST_P(AttentionBf16, TwoKeyBlocksWithinFactorsOfPlainBf16) {
  using miniattn::bf16;
  const AttentionBlocking blocking{16, 12};
  PlainBf16Rule rule;
  std::uint64_t seed = 4301;
  for (const MaskCase& mask : kMasks) {
    SCOPED_TRACE(mask.name);
    const Problem p = rounded<bf16>(make_problem(2, 3, 8, range_positions(0, 64), range_positions(0, 64), seed));
    const auto g = rounded<bf16>(random_values(p.q.size(), seed + 1000));
    ++seed;
    const Problem first = key_block(p, 0, 32), second = key_block(p, 32, p.nk());  // equal, as a ring's
    const PlainBf16 plain = plain_bf16_attention(p, mask, g);
    const Gradients grads = kernel_backward<bf16>(p, {first, second}, mask, blocking, g);  // dk, dv in key order
    for (const auto& order : {std::vector<Problem>{first, second}, std::vector<Problem>{second, first}})
      rule.check_all(kernel_forward_blocks<bf16>(p, order, mask, blocking), grads, plain, naive_forward(p, mask),
                     naive_backward(p, mask, g));
  }
}

// Grouped K/V heads in bf16 (a team of the fused kernel sums dk, dv over its
// group's query heads), within the bf16 rule: the kernel against plain bf16
// attention of the problem with each K/V head repeated for its group, dk and
// dv summed over the group on both sides.
TEST_P(AttentionBf16, GroupedHeadsWithinFactorsOfPlainBf16) {
  using miniattn::bf16;
  if (GetParam().kernel == AttentionKernel::cudnn) GTEST_SKIP() << "cudnn's grouped heads: AttentionCudnn";
  PlainBf16Rule rule;
  std::uint64_t seed = 4501;
  for (const auto& [heads, kv_heads] : {std::make_pair(4, 2), std::make_pair(6, 3), std::make_pair(4, 1)})
    for (const MaskCase& mask : {kMasks[0], kCausal}) {
      SCOPED_TRACE(std::string(mask.name) + " H=" + std::to_string(heads) + " KV=" + std::to_string(kv_heads));
      const Case c{"n50", range_positions(0, 50), range_positions(0, 50), {16, 12}};
      GroupedProblem gp = make_grouped_problem(heads, kv_heads, c, seed++);
      const Problem p = rounded<bf16>(gp.whole);
      const auto g = rounded<bf16>(random_values(p.q.size(), seed + 1000));
      const auto [got, grads] = kernel_grouped<bf16>(gp, mask, c.blocking, g);
      const PlainBf16 plain = plain_bf16_attention(p, mask, g);
      const auto ref_grads = naive_backward(p, mask, g);
      const std::size_t row = static_cast<std::size_t>(p.nk() * p.dh);
      // Copies: a lambda may not capture structured bindings before C++20 (nvcc warns).
      const int h = heads, kv = kv_heads;
      const auto grouped = [&](const std::vector<double>& x) { return sum_over_groups(x, h, kv, row); };
      rule.check(got.out, plain.forward.out, naive_forward(p, mask).out, 2.0, "out");
      rule.check(grads.dq, plain.grads.dq, ref_grads.dq, 3.0, "dq");
      rule.check(grads.dk, grouped(plain.grads.dk), grouped(ref_grads.dk), 3.0, "dk");
      rule.check(grads.dv, grouped(plain.grads.dv), grouped(ref_grads.dv), 3.0, "dv");
    }
  std::printf("bf16 %s kernel, grouped heads: worst error / (plain bf16 error + 1e-4) = %.2f\n", GetParam().name,
              rule.worst_ratio);
}

// The fused kernel's two paths of its bf16 products, vdpbf16ps and widened to
// fp32, add the same products in the same order (simd_bf16_dot.hpp): their
// results are equal bit for bit in every case, mask and head grouping, and a
// repeat is too. On a core without bf16 dot products both runs take the
// widened path, and the test shows the repeat only.
TEST(AttentionBf16Fused, ProductPathsAreBitwiseEqual) {
  using miniattn::bf16;
  namespace simd = miniattn::kernels::simd;
  if (!miniattn::kHostExecution) GTEST_SKIP() << "the fused kernel's bf16 version is a host kernel";
  std::printf("bf16 products on this core: %s\n", simd::to_string(simd::bf16_dot_path()));
  const auto run = [](const Problem& p, const MaskCase& mask, const AttentionBlocking& blocking,
                      const std::vector<double>& g, bool widened) {
    kernel_under_test = {AttentionKernel::fused, false, "fused", false, widened};
    const ForwardResult forward = kernel_forward<bf16>(p, mask, blocking);
    const Gradients grads = kernel_backward<bf16>(p, {p}, mask, blocking, g);
    return std::vector<std::vector<double>>{forward.out, forward.lse, grads.dq, grads.dk, grads.dv};
  };
  std::uint64_t seed = 4401;
  for (const auto& c : forward_cases())
    for (const MaskCase& mask : kMasks) {
      SCOPED_TRACE(c.name + " " + mask.name);
      const Problem p = rounded<bf16>(make_problem(2, 3, c.dh, c.q_pos, c.k_pos, seed));
      const auto g = rounded<bf16>(random_values(p.q.size(), seed + 1000));
      ++seed;
      const auto native = run(p, mask, c.blocking, g, false);
      EXPECT_EQ(native, run(p, mask, c.blocking, g, true)) << "the widened path's bits differ";
      EXPECT_EQ(native, run(p, mask, c.blocking, g, false)) << "a repeat's bits differ";
    }
  kernel_under_test = kKernels[0];
}

}  // namespace

// ---------------------------------------------------------------------------
// The cudnn kernel inside every strategy's blocks: for ring and all-gather
// (Ulysses degree 1), hybrid and Ulysses, each layout and mask, each group's
// queries meet every group's keys one block at a time, as RingAttention and
// AllGatherAttention feed the kernel (group_positions: the rows the run's
// positions table gives them), forward and then backward with the whole
// output and LSE. The planner, the merges, the per-block gradient sums and the
// gemm fallback (packed documents) are the kernel's own; the calls run cuDNN
// where the build has it, else its host emulation. Judged by the bf16 rule
// above, against float64 and plain bf16 attention of the whole sequence.
namespace cudnn_strategies {

using miniattn::Layout;

struct Decomposition {
  int sp, ulysses;
  Layout layout;
  int groups() const { return sp / ulysses; }
};

// Rows `positions` (of n) of a [1, heads, n, Dh] tensor.
std::vector<double> rows_of(const std::vector<double>& x, index_t heads, index_t n, index_t dh,
                            const std::vector<index_t>& positions) {
  std::vector<double> out;
  for (index_t h = 0; h < heads; ++h)
    for (const index_t p : positions)
      for (index_t d = 0; d < dh; ++d) out.push_back(x[static_cast<std::size_t>((h * n + p) * dh + d)]);
  return out;
}

// Adds a [1, heads, rows, Dh] View into rows `positions` of a [1, heads, n, Dh] tensor.
template <class V>
void add_rows_to(const V& view, index_t n, const std::vector<index_t>& positions, std::vector<double>& x) {
  const std::vector<double> rows = to_host(view);
  const index_t heads = view.extent(1), dh = view.extent(3), count = static_cast<index_t>(positions.size());
  for (index_t h = 0; h < heads; ++h)
    for (index_t i = 0; i < count; ++i)
      for (index_t d = 0; d < dh; ++d)
        x[static_cast<std::size_t>((h * n + positions[static_cast<std::size_t>(i)]) * dh + d)] +=
            rows[static_cast<std::size_t>((h * count + i) * dh + d)];
}

// The run's positions, kept for the whole run as the strategies keep theirs
// (the cudnn kernel plans a block once, keyed by these Views).
struct GroupPositions {
  std::vector<std::vector<index_t>> host;
  std::vector<View1<const index_t>> device;
  GroupPositions(index_t n, const Decomposition& z) {
    for (int g = 0; g < z.groups(); ++g) {
      host.push_back(miniattn::group_positions(n, z.sp, z.ulysses, g, z.layout));
      device.push_back(positions_to_device(host.back()));
    }
  }
};

// One group's queries through every group's key block, forward then backward.
void run_group(const Problem& p, const std::vector<double>& g, const GroupPositions& positions, int group,
               const miniattn::kernels::AttentionMask& mask, const AttentionBlocking& blocking, ForwardResult& fwd,
               Gradients& grads) {
  using miniattn::bf16;
  namespace k = miniattn::kernels;
  const index_t n = p.nq(), H = p.heads, dh = p.dh;
  const std::vector<index_t>& own = positions.host[static_cast<std::size_t>(group)];
  const index_t rows = static_cast<index_t>(own.size());
  const auto workspace = workspace_for<bf16>(blocking, 1, H, H, dh, rows, rows);
  const View4<bf16> q = to_device<bf16>(rows_of(p.q, H, n, dh, own), 1, H, rows, dh, "q");
  const View4<bf16> dout = to_device<bf16>(rows_of(g, H, n, dh, own), 1, H, rows, dh, "dout");
  View4<bf16> out("out", 1, H, rows, dh), dq("dq", 1, H, rows, dh);
  View3<float> lse("lse", 1, H, rows), row_sum("row_sum", 1, H, rows), delta("delta", 1, H, rows);
  const auto keys = [&](int source, const std::vector<double>& x) {
    const std::vector<index_t>& keys = positions.host[static_cast<std::size_t>(source)];
    return to_device<bf16>(rows_of(x, H, n, dh, keys), 1, H, rows, dh, "kv");
  };
  const auto scope = [&](int source) {
    return k::AttentionScope{positions.device[static_cast<std::size_t>(group)],
                             positions.device[static_cast<std::size_t>(source)], mask, blocking};
  };
  const int groups = static_cast<int>(positions.host.size());
  const auto out_acc = k::accumulator_of(out, workspace);
  k::attention_forward_init<float>(out_acc, lse, row_sum);
  for (int s = 0; s < groups; ++s)
    k::attention_forward_accumulate<bf16>(q, keys(s, p.k), keys(s, p.v), scope(s), out_acc, lse, row_sum, workspace);
  k::attention_forward_finalize<bf16>(out_acc, lse, row_sum, lse, out);
  k::attention_backward_delta<bf16>(out, dout, delta);
  const auto dq_acc = k::accumulator_of(dq, workspace);
  Kokkos::deep_copy(dq_acc, 0.0f);
  for (int s = 0; s < groups; ++s) {
    View4<bf16> dk("dk", 1, H, rows, dh), dv("dv", 1, H, rows, dh);
    k::attention_backward_accumulate<bf16>(q, keys(s, p.k), keys(s, p.v), out, dout, lse, delta, scope(s), dq_acc,
                                           dk, dv, workspace);
    add_rows_to(dk, n, positions.host[static_cast<std::size_t>(s)], grads.dk);
    add_rows_to(dv, n, positions.host[static_cast<std::size_t>(s)], grads.dv);
  }
  k::round_accumulator<bf16>(dq_acc, dq);
  add_rows_to(out, n, own, fwd.out);
  add_rows_to(dq, n, own, grads.dq);
}

}  // namespace cudnn_strategies

namespace cudnn_strategies {

// Every strategy, layout and mask through the kernel, calls cut to
// rows_per_call query rows (0: no cut), packed documents as calls or on the
// gemm fallback; prints the worst ratio to plain bf16.
void check_every_strategy_block(index_t rows_per_call, bool document_calls) {
  using miniattn::bf16;
  AttentionBlocking blocking;
  blocking.kernel = AttentionKernel::cudnn;
  blocking.chunk = 7;  // the fallback's gemm chunks
  blocking.gemm_fallback = !document_calls;
  blocking.cudnn_document_calls = document_calls;
  blocking.cudnn_rows_per_call = rows_per_call;
  const miniattn::kernels::CudnnTally before = miniattn::kernels::cudnn_tally();
  PlainBf16Rule rule;
  int cases = 0;
  std::uint64_t seed = 3001;
  for (int sp : {1, 2, 3, 4})
    for (int ulysses = 1; ulysses <= sp; ++ulysses) {
      if (sp % ulysses != 0) continue;
      for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
        for (const MaskCase& mask : kMasks) {
          const Decomposition z{sp, ulysses, layout};
          const index_t n = 2 * sp * 6;
          SCOPED_TRACE("sp " + std::to_string(sp) + " ulysses " + std::to_string(ulysses) + " " +
                       miniattn::to_string(layout) + " " + mask.name);
          const Problem p = rounded<bf16>(make_problem(1, 2, 8, range_positions(0, n), range_positions(0, n), seed));
          const auto g = rounded<bf16>(random_values(p.q.size(), seed + 1000));
          ++seed;
          ForwardResult got{std::vector<double>(p.q.size(), 0.0), {}};
          Gradients grads{std::vector<double>(p.q.size(), 0.0), std::vector<double>(p.k.size(), 0.0),
                          std::vector<double>(p.v.size(), 0.0)};
          const GroupPositions positions(n, z);
          for (int group = 0; group < z.groups(); ++group)
            run_group(p, g, positions, group, kernel_mask(mask), blocking, got, grads);
          rule.check_all(got, grads, plain_bf16_attention(p, mask, g), naive_forward(p, mask),
                         naive_backward(p, mask, g));
          ++cases;
        }
    }
  const miniattn::kernels::CudnnTally after = miniattn::kernels::cudnn_tally();
  EXPECT_EQ(after.cut_calls > before.cut_calls, rows_per_call > 0);
  EXPECT_EQ(after.fallback_blocks > before.fallback_blocks, !document_calls);
  std::printf("cudnn in %d strategy cases, %ld rows a call (0: no cut), documents %s: worst error / (plain bf16 "
              "error + 1e-4) = %.2f; %lld calls, %lld of them cut, %lld blocks on the gemm fallback\n",
              cases, static_cast<long>(rows_per_call), document_calls ? "as calls" : "on the gemm fallback",
              rule.worst_ratio, static_cast<long long>(after.calls - before.calls),
              static_cast<long long>(after.cut_calls - before.cut_calls),
              static_cast<long long>(after.fallback_blocks - before.fallback_blocks));
}

}  // namespace cudnn_strategies

// Also with every deterministic call cut to 5 query rows (a small cuDNN
// workspace: kernels.cudnn_workspace_mib), which splits every block here, and
// with packed documents as calls (kernels.cudnn_documents: calls).
TEST(AttentionCudnn, EveryStrategyBlockWithinFactorsOfPlainBf16) {
  for (const bool document_calls : {false, true})
    for (const index_t rows_per_call : {index_t{0}, index_t{5}})
      cudnn_strategies::check_every_strategy_block(rows_per_call, document_calls);
}

// cuDNN's workspace is allocated from the memory plan's count
// (cudnn_workspace_bytes): the largest call of a block, deterministic or
// not, cut or not, needs no more than the plan counted, as the frontend's
// sizes say (the emulation's); where a graph needs more, the kernel
// allocates what it needs and the tally says so (the report's
// plan_holds_on_every_rank then fails).
TEST(AttentionCudnn, WorkspaceIsThePlansUnlessAGraphNeedsMore) {
  namespace k = miniattn::kernels;
  const k::AttentionShape shape{2, 4, 2, 16, 300, 200};
  for (const bool deterministic : {true, false})
    for (const index_t rows_per_call : {index_t{0}, index_t{64}}) {
      SCOPED_TRACE(std::string(deterministic ? "deterministic" : "atomic") + ", rows per call " +
                   std::to_string(rows_per_call));
      AttentionBlocking blocking;
      blocking.kernel = AttentionKernel::cudnn;
      blocking.deterministic = deterministic;
      blocking.cudnn_rows_per_call = rows_per_call;
      k::CudnnBlocks blocks(shape, blocking);
      blocks.runner = std::make_shared<miniattn::testing::EmulatedSdpa>(deterministic);
      const std::size_t planned = k::cudnn_workspace_bytes(shape, blocking), before = blocks.bytes();
      EXPECT_EQ(k::cudnn_tally().workspace_planned_bytes, planned);
      k::SdpaCallShape largest{shape.batch, shape.heads, shape.kv_heads, shape.head_dim, shape.queries, shape.keys, {}};
      const bool cut = deterministic && rows_per_call > 0;
      largest.call.query_count = cut ? rows_per_call : shape.queries;
      largest.call.key_count = shape.keys;
      EXPECT_EQ(blocks.runner->workspace_needed(largest, true), planned);
      EXPECT_NE(blocks.workspace_for(largest, true), nullptr);
      EXPECT_EQ(k::cudnn_tally().workspace_bytes, planned);
      EXPECT_EQ(blocks.bytes(), before);
      blocks.runner = std::make_shared<miniattn::testing::EmulatedSdpa>(deterministic, 4096);
      blocks.workspace_for(largest, true);
      EXPECT_EQ(k::cudnn_tally().workspace_needed_bytes, planned + 4096);
      EXPECT_EQ(k::cudnn_tally().workspace_bytes, planned + 4096);
      EXPECT_EQ(blocks.bytes(), before + 4096);
    }
}

// cuDNN's backward refuses a call of one query and one key; a window of 2
// gives one where a ring step's block shows only its corner pair: the query
// at position 12 against the key at 11, fed as the first of two key blocks
// (the second, the diagonal one, gives the rows their other key). The cudnn
// kernel computes that pair itself: the gradients must be the gemm kernel's
// within bf16 rounding, and the pair's key must receive one.
TEST(AttentionCudnn, SinglePairCallMatchesGemm) {
  using miniattn::bf16;
  const MaskCase window2{"causal window 2", true, 2};
  const Problem p = rounded<bf16>(make_problem(2, 3, 8, range_positions(12, 24), range_positions(0, 24), 4101));
  const std::vector<Problem> blocks = {key_block(p, 0, 12), key_block(p, 12, 24)};
  const auto g = rounded<bf16>(random_values(p.q.size(), 4102));
  const KernelUnderTest before = kernel_under_test;
  kernel_under_test = {AttentionKernel::cudnn, false, "cudnn"};
  const Gradients by_cudnn = kernel_backward<bf16>(p, blocks, window2, {8, 8}, g);
  kernel_under_test = {AttentionKernel::gemm, false, "gemm"};
  const Gradients by_gemm = kernel_backward<bf16>(p, blocks, window2, {8, 8}, g);
  kernel_under_test = before;
  const Gradients exact = naive_backward(p, window2, g);
  for (const auto& [got, gemm, truth, what] :
       {std::tuple{&by_cudnn.dq, &by_gemm.dq, &exact.dq, "dq"}, std::tuple{&by_cudnn.dk, &by_gemm.dk, &exact.dk, "dk"},
        std::tuple{&by_cudnn.dv, &by_gemm.dv, &exact.dv, "dv"}}) {
    EXPECT_LT(relative_error(*got, *gemm), 1e-2) << what;
    EXPECT_LT(relative_error(*got, *truth), 1e-2) << what;
  }
  double key_11 = 0.0;  // sample 0, head 0, key 11: its dk comes from the single pair alone
  for (index_t d = 0; d < p.dh; ++d) key_11 = std::max(key_11, std::fabs(by_cudnn.dk[static_cast<std::size_t>(11 * p.dh + d)]));
  EXPECT_GT(key_11, 1e-3) << "the single pair's key received no gradient";
}
