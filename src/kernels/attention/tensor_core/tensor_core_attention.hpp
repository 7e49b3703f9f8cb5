#pragma once
// Internal to src/kernels: the `tensor_core` attention kernel of attention.hpp,
// FlashAttention-2's structure (Dao, 2023) on NVIDIA tensor cores: bf16 Q, K,
// V in, fp32 products (mma.sync m16n8k16, mma_fragments.hpp), fp32 softmax
// statistics. A team of 4 warps owns 64 query rows (forward, dq) or 64 key
// rows (dk, dv), 16 per warp, and walks the other side's 64-row blocks
// through shared memory; a warp keeps its rows' operands and accumulators in
// registers. The backward pass is two launches, dk/dv by key block then dq by
// query block, so no sum needs a floating-point atomic and every run gives
// the same bits. The contracts are attention.hpp's accumulate functions'.
// Compiled only under KOKKOS_ENABLE_CUDA for devices of compute capability
// 8.0 or later; elsewhere the functions throw (the deck check refuses the
// kernel first: tensor_core_unavailable_reason).
#include <string>

#include "kernels/attention/attention.hpp"

namespace miniattn::kernels {

// Why this build or device cannot run the kernel for heads of head_dim values,
// or empty when it can (head widths 64 and 128 are compiled).
std::string tensor_core_unavailable_reason(index_t head_dim);

void tensor_core_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                    const View4<const bf16>& v, const AttentionScope& scope,
                                    const View4<float>& out_acc, const View3<float>& row_max,
                                    const View3<float>& row_sum);

void tensor_core_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                     const View4<const bf16>& v, const View4<const bf16>& dout,
                                     const View3<const float>& lse, const View3<const float>& delta,
                                     const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                                     const View4<bf16>& dv);

}  // namespace miniattn::kernels
