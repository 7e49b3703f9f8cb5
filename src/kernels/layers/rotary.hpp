#pragma once
// Rotary position embeddings (RoPE; Su et al. 2021) in the rotate-half
// convention of GPT-NeoX, Llama and Hugging Face transformers: a head vector
// x of width Dh is rotated pair by pair, pair i = (x_i, x_{i + Dh/2}) for
// i < Dh/2, by the angle pos * theta^(-2i/Dh):
//   x'_i = x_i cos - x_{i+Dh/2} sin,   x'_{i+Dh/2} = x_{i+Dh/2} cos + x_i sin.
// The angles are computed in fp64 (they reach 1e6 radians at a million
// tokens, where fp32 keeps no fraction of a turn) and stored as cos and sin
// in the compute type. The inverse rotation (angle -> -angle) is the
// transpose, which the backward pass applies to the gradients of q and k.
#include "core/types.hpp"

namespace miniattn::kernels {

// cos, sin [S, n, Dh/2] for local rows of global positions `positions` [n]:
// S = 1 without packed documents (the position is the global one); with
// documents [B, N] (S = B; ids non-decreasing in the position) each token's
// position is its distance from the start of its document in its sample.
template <class A>
void rotary_table(const View1<const index_t>& positions, const View2<const index_t>& documents, double theta,
                  const View3<A>& cos, const View3<A>& sin);

// x [B, heads, n, Dh] rotated in place by the table (S = 1 or B); inverse:
// rotated back (the transpose).
template <class T>
void rotate(const View4<T>& x, const View3<const Acc<T>>& cos, const View3<const Acc<T>>& sin, bool inverse);

}  // namespace miniattn::kernels
