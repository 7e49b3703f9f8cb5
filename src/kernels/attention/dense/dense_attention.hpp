#pragma once
// Attention with materialised score blocks, the building blocks of Ring
// Self-Attention (RSA): for one query block and one key block the full score
// block [n, nk] is stored, and the softmax runs over a row of such blocks.
// The products are batched GEMMs over the heads (head_batches.hpp), whatever
// kernels.attention says: RSA stores its scores by definition.
// T is the storage (bf16: scores and probabilities in bf16); statistics, out
// and dq accumulate in Acc<T>.
// Layouts: q, out [B, H, rows, Dh]; k, v [B, KV, rows, Dh] with KV dividing H
// (grouped K/V heads: query head h reads K/V head h / (H / KV)); a score or
// probability block [B, H, n, nk]; all blocks of a row [G, B, H, n, nk].
#include "core/types.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/layers/ulysses_layout.hpp"

namespace miniattn::kernels {

// scores = q k^T / sqrt(Dh), -inf where the mask hides k_pos from q_pos.
template <class T>
void score_block(const View4<const T>& q, const View4<const T>& k, const View1<const index_t>& q_pos,
                 const View1<const index_t>& k_pos, const AttentionMask& mask, const View4<T>& scores);

// In place over all G blocks of each row: scores -> softmax probabilities;
// lse receives each row's log-sum-exp.
template <class T>
void softmax_over_blocks(const View5<T>& scores, const View3<Acc<T>>& lse);

// out += probabilities v (out accumulates in Acc<T>)
template <class T>
void apply_probabilities(const View4<const T>& probabilities, const View4<const T>& v, const View4<Acc<T>>& out);

// The backward pass through one block, accumulating (+=):
//   dP = dout v^T, dS = P * (dP - delta), dq += dS k / sqrt(Dh),
//   dk += dS^T q / sqrt(Dh), dv += P^T dout.
// It runs as many query rows at a time as the workspace score_grads
// [B, H, rows, nk] (dP, then dS) holds: RSA gives it dense_backward_rows(n),
// a fraction of the blocks it stores.
constexpr index_t kDenseBackwardRows = 256;
inline index_t dense_backward_rows(index_t n) { return n < kDenseBackwardRows ? n : kDenseBackwardRows; }
template <class T>
void dense_block_backward(const View4<const T>& probabilities, const View4<const T>& q, const View4<const T>& k,
                          const View4<const T>& v, const View4<const T>& dout, const View3<const Acc<T>>& delta,
                          const View4<T>& score_grads, const View4<Acc<T>>& dq, const View4<T>& dk,
                          const View4<T>& dv);

}  // namespace miniattn::kernels
