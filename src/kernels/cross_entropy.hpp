#pragma once
// Softmax cross-entropy over the vocabulary for each row of logits.
#include "core/types.hpp"

namespace miniattn::kernels {

// Sum over rows of -log softmax(logits[r])[targets[r]], accumulated in double.
template <class T>
double cross_entropy_loss_sum(const View2<const T>& logits, const View1<const index_t>& targets);

// dlogits[r] = scale * (softmax(logits[r]) - onehot(targets[r]))  (overwritten; may alias logits).
template <class T>
void cross_entropy_backward(const View2<const T>& logits, const View1<const index_t>& targets, T scale,
                            const View2<T>& dlogits);

}  // namespace miniattn::kernels
