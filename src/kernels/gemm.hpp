#pragma once
// Dense products through KokkosBlas::gemm. All operands are LayoutRight and
// contiguous so the call reaches the vendor BLAS (OpenBLAS, cuBLAS).
#include "core/types.hpp"

namespace miniattn::kernels {

// C = alpha * op(A) op(B) + beta * C, op = 'N' (as is) or 'T' (transposed).
template <class T>
void gemm(char trans_a, char trans_b, T alpha, const View2<const T>& a, const View2<const T>& b, T beta,
          const View2<T>& c);

}  // namespace miniattn::kernels
