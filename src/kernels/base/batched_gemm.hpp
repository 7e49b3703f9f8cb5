#pragma once
// Many products of equal shape at once, C_i = alpha op(A_i) op(B_i) + beta C_i
// for i < count, where matrix i of an operand lies at data + i * stride
// (row-major, contiguous). Chunked attention (chunked_attention.cpp) runs one
// such batch over every (sample, K/V head) pair of a chunk pair.
//
// A and B hold T (fp32, fp64 or bf16); C holds T or Acc<T> (bf16 products
// into fp32 gradients or accumulators); products accumulate in Acc<T>.
//   fp32 / fp64, CUDA: one cublas<S|D>gemmStridedBatched call on the execution
//     space's stream (KokkosBlas::gemm has no batched cuBLAS path).
//   fp32 / fp64 elsewhere: a loop of kernels::gemm (KokkosBlas: OpenBLAS;
//     on HIP Kokkos Kernels' own GEMM, or rocBLAS through its TPL).
//   bf16, CUDA: cublasGemmStridedBatchedEx, bf16 in, CUBLAS_COMPUTE_32F
//     (tensor cores), C in bf16 or fp32.
//   bf16, host backends: oneDNN's matmul in builds with it on cores with
//     bf16 units (onednn_gemm.hpp: fp32 accumulation, one call a batch); else
//     blocks of 256 rows widened to fp32 and multiplied by the fp32 BLAS, C
//     rounded back when it is bf16 (OpenBLAS as Debian builds it has no bf16 GEMM).
//   bf16, other devices (HIP): groups of products widened to fp32 in device
//     memory, one fp32 kernels::gemm a product, C rounded back on the device;
//     correct but slow (see batched_gemm.cpp).
// The bf16 paths compute the same products to rounding. Each is deterministic
// for a given library, device and shape (no atomics), except Kokkos Kernels'
// own device GEMM for A^T B into fewer than 100 entries (its dot-based
// kernel adds with atomics).
#include "core/types.hpp"

namespace miniattn::kernels {

template <class T>
struct MatrixBatch {
  T* data = nullptr;
  index_t rows = 0, cols = 0;  // one matrix as stored (before op)
  index_t stride = 0;          // elements from one matrix to the next
};

// trans_a / trans_b: 'N' or 'T' (bf16 with trans_a 'T': trans_b 'N' only).
// Shapes are checked as kernels::gemm checks them.
template <class T, class C>
void batched_gemm(char trans_a, char trans_b, Acc<T> alpha, const MatrixBatch<const T>& a,
                  const MatrixBatch<const T>& b, Acc<T> beta, const MatrixBatch<C>& c, index_t count);

// The bf16 path of devices without a bf16 BLAS (HIP): operands widened to
// fp32 in the execution space's memory, at most `widened_values` of them at
// a time (larger products in row blocks), one fp32 kernels::gemm a product.
// batched_gemm takes it on such devices with kDeviceWidenedValues; it runs on
// every backend, so the host tests check it, with small limits, against the
// host path. Shapes are not checked here (batched_gemm checks them).
constexpr index_t kDeviceWidenedValues = index_t(1) << 23;  // 32 MiB of fp32
template <class C>
void batched_gemm_bf16_widened(char trans_a, char trans_b, float alpha, const MatrixBatch<const bf16>& a,
                               const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count,
                               index_t widened_values = kDeviceWidenedValues);

}  // namespace miniattn::kernels
