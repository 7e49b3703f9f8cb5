#include "kernels/batched_gemm.hpp"

#include <sstream>
#include <stdexcept>

#include "kernels/gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#endif

namespace miniattn::kernels {

namespace {

template <class T>
index_t op_rows(char trans, const MatrixBatch<T>& x) {
  return trans == 'T' || trans == 't' ? x.cols : x.rows;
}
template <class T>
index_t op_cols(char trans, const MatrixBatch<T>& x) {
  return trans == 'T' || trans == 't' ? x.rows : x.cols;
}

#if defined(KOKKOS_ENABLE_CUDA)
// One handle per process, made on first use and destroyed when Kokkos finalizes
// (before the CUDA context goes away).
cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("batched_gemm: cublasCreate failed");
    Kokkos::push_finalize_hook([h] { cublasDestroy(h); });
    return h;
  }();
  return handle;
}

cublasOperation_t cublas_op(char trans) { return trans == 'T' || trans == 't' ? CUBLAS_OP_T : CUBLAS_OP_N; }

cublasStatus_t strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                               const float* alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                               long long sb, const float* beta, float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
cublasStatus_t strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                               const double* alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                               long long sb, const double* beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
// row-major matrix read column-major is its transpose: so B goes first, each
// with its own op, and the leading dimensions are the stored column counts.
template <class T>
void run_batch(char ta, char tb, T alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b, T beta,
               const MatrixBatch<T>& c, index_t count) {
  cublasHandle_t h = cublas_handle();
  cublasSetStream(h, ExecSpace().cuda_stream());
  const cublasStatus_t status =
      strided_batched(h, cublas_op(tb), cublas_op(ta), static_cast<int>(c.cols), static_cast<int>(c.rows),
                      static_cast<int>(op_cols(ta, a)), &alpha, b.data, static_cast<int>(b.cols), b.stride, a.data,
                      static_cast<int>(a.cols), a.stride, &beta, c.data, static_cast<int>(c.cols), c.stride,
                      static_cast<int>(count));
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("batched_gemm: cublas strided-batched gemm failed (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}
#else
template <class T>
void run_batch(char ta, char tb, T alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b, T beta,
               const MatrixBatch<T>& c, index_t count) {
  for (index_t i = 0; i < count; ++i)
    gemm<T>(ta, tb, alpha, View2<const T>(a.data + i * a.stride, a.rows, a.cols),
            View2<const T>(b.data + i * b.stride, b.rows, b.cols), beta, View2<T>(c.data + i * c.stride, c.rows, c.cols));
}
#endif

}  // namespace

template <class T>
void batched_gemm(char trans_a, char trans_b, T alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b,
                  T beta, const MatrixBatch<T>& c, index_t count) {
  const index_t depth = op_cols(trans_a, a);
  if (depth != op_rows(trans_b, b) || op_rows(trans_a, a) != c.rows || op_cols(trans_b, b) != c.cols) {
    std::ostringstream os;
    os << "kernels::batched_gemm: shapes do not match: op" << trans_a << "(A) is " << op_rows(trans_a, a) << "x"
       << depth << ", op" << trans_b << "(B) is " << op_rows(trans_b, b) << "x" << op_cols(trans_b, b) << ", C is "
       << c.rows << "x" << c.cols;
    throw std::invalid_argument(os.str());
  }
  if (count == 0 || c.rows == 0 || c.cols == 0) return;
  run_batch<T>(trans_a, trans_b, alpha, a, b, beta, c, count);
}

template void batched_gemm<float>(char, char, float, const MatrixBatch<const float>&, const MatrixBatch<const float>&,
                                  float, const MatrixBatch<float>&, index_t);
template void batched_gemm<double>(char, char, double, const MatrixBatch<const double>&,
                                   const MatrixBatch<const double>&, double, const MatrixBatch<double>&, index_t);

}  // namespace miniattn::kernels
