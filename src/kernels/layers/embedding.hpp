#pragma once
// Token + learned position embedding. Positions are indexed by GLOBAL sequence
// position; each rank holds only the wpe rows of the positions it owns, so the
// caller passes, for each local position, the row of its local wpe block.
// A wpe_local (and dwpe_local) of no rows means no learned positions (rotary
// positions, model.positions rope): x is the token embedding alone.
#include "core/types.hpp"

namespace miniattn::kernels {

// x[r, :] = wte[tokens[r], :] + wpe_local[wpe_row[(first_row + r) % n], :], n = wpe_row.extent(0):
// the rows are rows first_row .. first_row + R - 1 of the grid of (sample, local
// position) rows g = sample * n + position (a tensor-parallel rank holds a
// contiguous chunk of them, which may begin and end inside a sample).
// tokens [R], x [R, D] (overwritten).
template <class T>
void embedding_forward(const View1<const index_t>& tokens, const View1<const index_t>& wpe_row,
                       const View2<const T>& wte, const View2<const T>& wpe_local, const View2<T>& x,
                       index_t first_row = 0);

// The rows of each token, in increasing row order: the order in which
// embedding_backward sums them, so that the wte gradient has the same bits on
// any number of threads (no atomics). Built on the host (a counting sort).
struct TokenRows {
  View1<index_t> offsets;  // [vocab + 1]: token v's rows are rows(offsets(v) .. offsets(v + 1) - 1)
  View1<index_t> rows;     // [R]
  // Host copies (the same Views on host backends) for the counting sort.
  View1<index_t>::HostMirror host_tokens, host_offsets, host_rows;
  TokenRows() = default;
  TokenRows(index_t vocab, index_t row_count);
  // offsets, rows and host_tokens (the other mirrors are the same Views on host backends).
  std::size_t allocated_bytes() const { return (offsets.span() + rows.span() + host_tokens.span()) * sizeof(index_t); }
};

// Fills `grouped` from tokens [R]; throws std::invalid_argument for a token
// outside [0, vocab) or a size mismatch.
void group_rows_by_token(const View1<const index_t>& tokens, TokenRows& grouped);

// dwte[v] += sum of dx[r] over the rows of token v (in row order);
// dwpe_local[wpe_row[i]] += sum over samples s of dx[s * n + i - first_row] (in
// sample order, over the rows held). wpe_row must not repeat a row (each local
// position has its own).
// T: the activations' storage; the gradients are Param<T> (fp32 for bf16).
template <class T>
void embedding_backward(const View2<const T>& dx, const TokenRows& token_rows, const View1<const index_t>& wpe_row,
                        const View2<Param<T>>& dwte, const View2<Param<T>>& dwpe_local, index_t first_row = 0);

}  // namespace miniattn::kernels
