#include "kernels/attention/dense/dense_attention.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/base/head_batches.hpp"

namespace miniattn::kernels {

namespace {
using Range = Kokkos::RangePolicy<ExecSpace>;

// The batched-GEMM operands of a block (head_batches.hpp): all n query rows
// of group member g, all nk key rows, member g's [n, nk] blocks.
struct BlockOperands {
  index_t n, nk, dh, group;
  template <class U>
  MatrixBatch<U> queries(U* x, index_t g) const { return head_rows(x, n, dh, group, g, index_t(0), n); }
  template <class U>
  MatrixBatch<U> keys(U* x) const { return head_rows(x, nk, dh, index_t(1), index_t(0), index_t(0), nk); }
  template <class U>
  MatrixBatch<U> blocks(U* x, index_t g) const { return score_blocks(x, group, g, n, nk); }
};

template <class Q, class K>
BlockOperands block_operands(const Q& q, const K& k) {
  return {index_t(q.extent(2)), index_t(k.extent(2)), index_t(q.extent(3)), index_t(q.extent(1) / k.extent(1))};
}
}  // namespace

template <class T>
void score_block(const View4<const T>& q, const View4<const T>& k, const View1<const index_t>& q_pos,
                 const View1<const index_t>& k_pos, const AttentionMask& mask, const View4<T>& scores) {
  const index_t B = q.extent(0), H = q.extent(1), n = q.extent(2), nk = k.extent(2), entries = B * k.extent(1);
  const BlockOperands at = block_operands(q, k);
  const Acc<T> scale = Acc<T>(1) / compat::sqrt(static_cast<Acc<T>>(at.dh));
  for (index_t g = 0; g < at.group; ++g)
    batched_gemm<T>('N', 'T', scale, at.queries(q.data(), g), at.keys(k.data()), Acc<T>(0),
                    at.blocks(scores.data(), g), entries);
  if (!mask.hides_any()) return;
  const T minus_inf = narrow<T>(-compat::infinity<Acc<T>>());
  Kokkos::parallel_for(
      "miniattn::score_block_mask", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H);
        for (index_t j = 0; j < nk; ++j)
          if (mask.hides(b, q_pos(i), k_pos(j))) scores(b, h, i, j) = minus_inf;
      });
}

// In Acc<T>; the probabilities are stored as T.
template <class T>
void softmax_over_blocks(const View5<T>& scores, const View3<Acc<T>>& lse) {
  using A = Acc<T>;
  const index_t G = scores.extent(0), B = scores.extent(1), H = scores.extent(2), n = scores.extent(3),
                nk = scores.extent(4);
  const A minus_inf = -compat::infinity<A>();
  Kokkos::parallel_for(
      "miniattn::softmax_over_blocks", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H);
        const auto score = [&](index_t g, index_t j) { return widen(scores(g, b, h, i, j)); };
        A row_max = minus_inf;
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j) row_max = score(g, j) > row_max ? score(g, j) : row_max;
        const auto probability = [&](index_t g, index_t j) {
          return score(g, j) == minus_inf ? A(0) : compat::exp(score(g, j) - row_max);
        };
        // Unnormalised probabilities kept in place where T holds them exactly, else computed again.
        constexpr bool exact = std::is_same<T, A>::value;
        A sum = 0;
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j) {
            const A p = probability(g, j);
            if (exact) scores(g, b, h, i, j) = narrow<T>(p);
            sum += p;
          }
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j)
            scores(g, b, h, i, j) = narrow<T>((exact ? score(g, j) : probability(g, j)) / sum);
        lse(b, h, i) = row_max + compat::log(sum);
      });
}

template <class T>
void apply_probabilities(const View4<const T>& probabilities, const View4<const T>& v, const View4<Acc<T>>& out) {
  const BlockOperands at = block_operands(out, v);
  for (index_t g = 0; g < at.group; ++g)
    batched_gemm<T>('N', 'N', Acc<T>(1), at.blocks(probabilities.data(), g), at.keys(v.data()), Acc<T>(1),
                    at.queries(out.data(), g), out.extent(0) * v.extent(1));
}

namespace {

// Query rows [first, first + rows) of one block's backward: dP = dout v^T
// into the workspace, dS = P (dP - delta) / sqrt(Dh) in place, then
// dq += dS k, dk += dS^T q, dv += P^T dout, summing dk, dv over a K/V head's
// group of query heads in group order (no atomics).
template <class T>
void dense_rows_backward(const BlockOperands& at, index_t first, index_t rows, const View4<const T>& probabilities,
                         const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                         const View4<const T>& dout, const View3<const Acc<T>>& delta, T* score_grads,
                         const View4<Acc<T>>& dq, const View4<T>& dk, const View4<T>& dv) {
  using A = Acc<T>;
  const index_t entries = q.extent(0) * k.extent(1), H = q.extent(1), n = at.n, nk = at.nk, G = at.group;
  const auto part = [&](auto* x, index_t g) { return head_rows(x, n, at.dh, G, g, first, rows); };
  const auto probability_rows = [&](index_t g) { return head_rows(probabilities.data(), n, nk, G, g, first, rows); };
  const auto grad_rows = [&](auto* x, index_t g) { return score_blocks(x, G, g, rows, nk); };
  for (index_t g = 0; g < G; ++g)
    batched_gemm<T>('N', 'T', A(1), part(dout.data(), g), at.keys(v.data()), A(0), grad_rows(score_grads, g),
                    entries);
  const A scale = A(1) / compat::sqrt(static_cast<A>(at.dh));
  Kokkos::parallel_for(
      "miniattn::dense_block_score_gradients", Range(0, q.extent(0) * H * rows), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % rows, bh = r / rows, b = bh / H, h = bh % H;
        T* const ds = score_grads + r * nk;
        for (index_t j = 0; j < nk; ++j)
          ds[j] = narrow<T>(widen(probabilities(b, h, first + i, j)) * (widen(ds[j]) - delta(b, h, first + i)) * scale);
      });
  for (index_t g = 0; g < G; ++g) {
    const auto ds = grad_rows(static_cast<const T*>(score_grads), g);
    batched_gemm<T>('T', 'N', A(1), probability_rows(g), part(dout.data(), g), A(1), at.keys(dv.data()), entries);
    batched_gemm<T>('T', 'N', A(1), ds, part(q.data(), g), A(1), at.keys(dk.data()), entries);
    batched_gemm<T>('N', 'N', A(1), ds, at.keys(k.data()), A(1), part(dq.data(), g), entries);
  }
}

}  // namespace

template <class T>
void dense_block_backward(const View4<const T>& probabilities, const View4<const T>& q, const View4<const T>& k,
                          const View4<const T>& v, const View4<const T>& dout, const View3<const Acc<T>>& delta,
                          const View4<T>& score_grads, const View4<Acc<T>>& dq, const View4<T>& dk,
                          const View4<T>& dv) {
  const BlockOperands at = block_operands(q, k);
  const index_t chunk = score_grads.extent(2);
  if (chunk < 1 || score_grads.extent(3) != k.extent(2) || score_grads.extent(1) != q.extent(1))
    throw RuntimeFailure("dense_block_backward: score_grads must be [B, H, rows >= 1, n_k]");
  for (index_t first = 0; first < at.n; first += chunk)
    dense_rows_backward<T>(at, first, std::min(chunk, at.n - first), probabilities, q, k, v, dout, delta,
                           score_grads.data(), dq, dk, dv);
}

#define MINIATTN_INSTANTIATE(T)                                                                                 \
  template void score_block<T>(const View4<const T>&, const View4<const T>&, const View1<const index_t>&,       \
                               const View1<const index_t>&, const AttentionMask&, const View4<T>&);             \
  template void softmax_over_blocks<T>(const View5<T>&, const View3<Acc<T>>&);                                  \
  template void apply_probabilities<T>(const View4<const T>&, const View4<const T>&, const View4<Acc<T>>&);     \
  template void dense_block_backward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,    \
                                        const View4<const T>&, const View4<const T>&, const View3<const Acc<T>>&, \
                                        const View4<T>&, const View4<Acc<T>>&, const View4<T>&, const View4<T>&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
MINIATTN_INSTANTIATE(bf16)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::kernels
