#pragma once
// Internal to src/kernels: chunked attention through GEMMs (Rabe and Staats,
// "Self-attention does not need O(n^2) memory", 2021), the `gemm` kernel of
// attention.hpp. The public accumulate functions call these when
// blocking.kernel is gemm; the contract is theirs.
#include "kernels/attention/attention.hpp"

namespace miniattn::kernels {

template <class T>
void chunked_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                const AttentionScope& scope, const View4<Acc<T>>& out_acc,
                                const View3<Acc<T>>& row_max, const View3<Acc<T>>& row_sum,
                                const AttentionWorkspace<T>& workspace);

template <class T>
void chunked_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                 const View4<const T>& dout, const View3<const Acc<T>>& lse,
                                 const View3<const Acc<T>>& delta, const AttentionScope& scope,
                                 const View4<Acc<T>>& dq, const View4<T>& dk, const View4<T>& dv,
                                 const AttentionWorkspace<T>& workspace);

}  // namespace miniattn::kernels
