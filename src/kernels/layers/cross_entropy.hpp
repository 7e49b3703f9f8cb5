#pragma once
// Softmax cross-entropy over the vocabulary for each row of logits.
#include "core/types.hpp"

namespace miniattn::kernels {

// Per row: lse[r] = log sum_j exp(logits[r, j]), loss[r] = lse[r] - logits[r, targets[r]]
// (in double). Throws std::invalid_argument for a target outside [0, vocab).
// T: the logits' storage; lse is Acc<T> (fp32 for bf16), as is the arithmetic.
template <class T>
void cross_entropy_forward(const View2<const T>& logits, const View1<const index_t>& targets,
                           const View1<Acc<T>>& lse, const View1<double>& loss);

// dlogits[r] = scale * (softmax(logits[r]) - onehot(targets[r])) from the forward's lse
// (overwritten; may alias logits).
template <class T>
void cross_entropy_backward(const View2<const T>& logits, const View1<const index_t>& targets,
                            const View1<const Acc<T>>& lse, Acc<T> scale, const View2<T>& dlogits);

}  // namespace miniattn::kernels
