#pragma once
// Many products of equal shape at once, C_i = alpha op(A_i) op(B_i) + beta C_i
// for i < count, where matrix i of an operand lies at data + i * stride
// (row-major, contiguous). Chunked attention (chunked_attention.cpp) runs one
// such batch over every (sample, K/V head) pair of a chunk pair.
//
// With CUDA: one cublas<S|D>gemmStridedBatched call on the execution space's
// stream (KokkosBlas::gemm has no batched cuBLAS path). Elsewhere: a loop of
// kernels::gemm (KokkosBlas, reaching OpenBLAS or rocBLAS). Both run the
// entries' products independently, so they agree to rounding; each is
// deterministic for a given library, device and shape (no atomics).
#include "core/types.hpp"

namespace miniattn::kernels {

template <class T>
struct MatrixBatch {
  T* data = nullptr;
  index_t rows = 0, cols = 0;  // one matrix as stored (before op)
  index_t stride = 0;          // elements from one matrix to the next
};

// trans_a / trans_b: 'N' or 'T'. Shapes are checked as kernels::gemm checks them.
template <class T>
void batched_gemm(char trans_a, char trans_b, T alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b,
                  T beta, const MatrixBatch<T>& c, index_t count);

}  // namespace miniattn::kernels
