#pragma once
// Token + learned position embedding. Positions are indexed by GLOBAL sequence
// position; each rank holds only the wpe rows of the positions it owns, so the
// caller passes, for each local position, the row of its local wpe block.
#include "core/types.hpp"

namespace miniattn::kernels {

// x[r, :] = wte[tokens[r], :] + wpe_local[wpe_row[r % n], :], n = wpe_row.extent(0),
// rows r = sample * n + local position.   tokens [rows], x [rows, D] (overwritten).
template <class T>
void embedding_forward(const View1<const index_t>& tokens, const View1<const index_t>& wpe_row,
                       const View2<const T>& wte, const View2<const T>& wpe_local, const View2<T>& x);

// dwte[tokens[r]] += dx[r], dwpe_local[wpe_row[r % n]] += dx[r].
template <class T>
void embedding_backward(const View2<const T>& dx, const View1<const index_t>& tokens,
                        const View1<const index_t>& wpe_row, const View2<T>& dwte, const View2<T>& dwpe_local);

}  // namespace miniattn::kernels
