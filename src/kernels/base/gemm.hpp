#pragma once
// Dense products through KokkosBlas::gemm. All operands are LayoutRight and
// contiguous so the call reaches the vendor BLAS (OpenBLAS, cuBLAS; rocBLAS
// where Kokkos Kernels has its TPL, else its own GEMM).
#include "core/types.hpp"

namespace miniattn::kernels {

// C = alpha * op(A) op(B) + beta * C, op = 'N' (as is) or 'T' (transposed).
// A and B hold T; C holds T or, for bf16 operands, fp32 (a gradient or an
// accumulator); products accumulate in Acc<T>. fp32 and fp64 go to KokkosBlas,
// bf16 to kernels::batched_gemm (cuBLAS GemmEx on CUDA, fp32 BLAS on widened
// blocks elsewhere, widened in device memory on HIP).
template <class T, class C = T>
void gemm(char trans_a, char trans_b, Acc<T> alpha, const View2<const T>& a, const View2<const T>& b, Acc<T> beta,
          const View2<C>& c);

}  // namespace miniattn::kernels
