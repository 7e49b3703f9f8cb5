#pragma once
// Internal to src/kernels: the `fused` attention kernel of
// kernels/attention/attention.hpp, tiled attention with an online softmax in
// team scratch (fused_forward.cpp, fused_backward.cpp; the tile machinery in
// fused_tiles.hpp). fp32 and fp64 only: it stages tiles of its input type.
// The dispatch (kernels/attention/dispatch.cpp) calls these when
// blocking.kernel is fused, after checking the shapes; the contracts are
// attention.hpp's accumulate functions'.
#include "kernels/attention/attention.hpp"

namespace miniattn::kernels {

template <class T>
void fused_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                              const AttentionScope& scope, const View4<T>& out_acc, const View3<T>& row_max,
                              const View3<T>& row_sum);

template <class T>
void fused_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                               const View4<const T>& dout, const View3<const T>& lse, const View3<const T>& delta,
                               const AttentionScope& scope, const View4<T>& dq, const View4<T>& dk,
                               const View4<T>& dv, const AttentionWorkspace<T>& workspace);

}  // namespace miniattn::kernels
