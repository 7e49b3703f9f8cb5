#pragma once
// Internal to src/kernels: the `fused` attention kernel of
// kernels/attention/attention.hpp, tiled attention with an online softmax in
// team scratch (fused_forward.cpp, fused_backward.cpp; the tile machinery in
// fused_tiles.hpp) for fp32 and fp64, which stages tiles of its input type.
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

// The bf16 version, a host kernel (fused_bf16_forward.cpp,
// fused_bf16_backward.cpp): bf16 products with fp32 accumulation
// (kernels/base/simd_bf16_dot.hpp), the softmax and every accumulator fp32.
// Its workspace holds V^T and K^T by key tiles and, for the backward, fp32 dk
// and dv of the call's shape.
void fused_bf16_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                   const View4<const bf16>& v, const AttentionScope& scope,
                                   const View4<float>& out_acc, const View3<float>& row_max,
                                   const View3<float>& row_sum, const AttentionWorkspace<bf16>& workspace);

void fused_bf16_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                    const View4<const bf16>& v, const View4<const bf16>& dout,
                                    const View3<const float>& lse, const View3<const float>& delta,
                                    const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                                    const View4<bf16>& dv, const AttentionWorkspace<bf16>& workspace);

}  // namespace miniattn::kernels
