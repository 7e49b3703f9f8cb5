#include "kernels/base/batched_gemm.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/base/gemm.hpp"
#include "kernels/base/simd_pack.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#endif

namespace miniattn::kernels {

namespace {

bool transposed(char trans) { return trans == 'T' || trans == 't'; }

template <class T>
index_t op_rows(char trans, const MatrixBatch<T>& x) {
  return transposed(trans) ? x.cols : x.rows;
}
template <class T>
index_t op_cols(char trans, const MatrixBatch<T>& x) {
  return transposed(trans) ? x.rows : x.cols;
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
  cublasSetStream(handle, ExecSpace().cuda_stream());
  return handle;
}

cublasOperation_t cublas_op(char trans) { return transposed(trans) ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same<T, bf16>::value) return CUDA_R_16BF;
  else if constexpr (std::is_same<T, float>::value) return CUDA_R_32F;
  else return CUDA_R_64F;
}

void check(cublasStatus_t status) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("batched_gemm: cuBLAS strided-batched gemm failed (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
// row-major matrix read column-major is its transpose: so B goes first, each
// with its own op, and the leading dimensions are the stored column counts.
template <class T, class C>
void run_batch(char ta, char tb, Acc<T> alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b,
               Acc<T> beta, const MatrixBatch<C>& c, index_t count) {
  const int m = static_cast<int>(c.rows), n = static_cast<int>(c.cols), k = static_cast<int>(op_cols(ta, a));
  const int lda = static_cast<int>(a.cols), ldb = static_cast<int>(b.cols), ldc = static_cast<int>(c.cols);
  cublasHandle_t h = cublas_handle();
  if constexpr (std::is_same<T, float>::value && std::is_same<C, float>::value) {
    check(cublasSgemmStridedBatched(h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b.data, ldb, b.stride, a.data,
                                    lda, a.stride, &beta, c.data, ldc, c.stride, static_cast<int>(count)));
  } else if constexpr (std::is_same<T, double>::value && std::is_same<C, double>::value) {
    check(cublasDgemmStridedBatched(h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b.data, ldb, b.stride, a.data,
                                    lda, a.stride, &beta, c.data, ldc, c.stride, static_cast<int>(count)));
  } else {  // bf16 in, fp32 compute on the tensor cores
    check(cublasGemmStridedBatchedEx(h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b.data, cuda_type<T>(), ldb,
                                     b.stride, a.data, cuda_type<T>(), lda, a.stride, &beta, c.data, cuda_type<C>(),
                                     ldc, c.stride, static_cast<int>(count), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }
}
#else
// Host bf16: rows of 256 at a time widened to fp32, then the fp32 BLAS; C
// accumulated in fp32 and rounded once. The widened blocks live in three
// host buffers that grow to the largest block and are kept (a few hundred KiB
// to a few MiB, host memory only, outside the memory plan's Views): a chunked
// attention call makes thousands of small products.
constexpr index_t kWidenedRows = 256;

using HostFloats = std::vector<float>;
struct WidenedBlocks {
  HostFloats a, b, c;
};
WidenedBlocks& widened_blocks() {
  static WidenedBlocks blocks;
  return blocks;
}

// The rows*cols values at `from`, widened into `to` (resized), as a matrix.
// Plain loops over restrict pointers (host only): the compiler vectorises them.
// Pack by pack (simd::load_n / store_n: SIMD conversions on the host).
template <class T>
View2<const float> widened(const T* from, index_t rows, index_t cols, HostFloats& to) {
  constexpr int lanes = simd::Pack<float>::lanes;
  const index_t count = rows * cols;
  to.resize(static_cast<std::size_t>(count));
  for (index_t i = 0; i < count; i += lanes)
    simd::store_n(to.data() + i, simd::load_n(from + i, count - i < lanes ? int(count - i) : lanes),
                  count - i < lanes ? int(count - i) : lanes);
  return View2<const float>(to.data(), rows, cols);
}

template <class C>
void narrow_into(const HostFloats& from, index_t count, C* to) {
  constexpr int lanes = simd::Pack<float>::lanes;
  for (index_t i = 0; i < count; i += lanes) {
    const int width = count - i < lanes ? int(count - i) : lanes;
    simd::store_n(to + i, simd::load_n(from.data() + i, width), width);
  }
}

// C [m, n] (one matrix) as fp32: C itself, or a widened copy (zeros when beta is 0).
template <class C>
View2<float> fp32_output(C* c, index_t m, index_t n, float beta, HostFloats& copy) {
  if constexpr (std::is_same<C, float>::value) {
    return View2<float>(c, m, n);
  } else {
    if (beta != 0.0f) return View2<float>(const_cast<float*>(widened(c, m, n, copy).data()), m, n);
    copy.resize(static_cast<std::size_t>(m * n));  // beta 0: the product overwrites C without reading it
    return View2<float>(copy.data(), m, n);
  }
}

template <class T, class C>
void bf16_product(char ta, char tb, float alpha, const T* a, const T* b, float beta, C* c, index_t m, index_t n,
                  index_t k, const MatrixBatch<const T>& bs) {
  static_assert(kHostExecution, "bf16 GEMMs off CUDA widen into host memory: host backends only");
  WidenedBlocks& w = widened_blocks();
  HostFloats &wa = w.a, &wb = w.b, &wc = w.c;
  if (!transposed(ta)) {  // row blocks of A and C against all of B
    const View2<const float> bf = widened(b, bs.rows, bs.cols, wb);
    for (index_t i0 = 0; i0 < m; i0 += kWidenedRows) {
      const index_t rows = std::min(kWidenedRows, m - i0);
      const View2<float> cf = fp32_output(c + i0 * n, rows, n, beta, wc);
      gemm<float>(ta, tb, alpha, widened(a + i0 * k, rows, k, wa), bf, beta, cf);
      if constexpr (!std::is_same<C, float>::value) narrow_into(wc, rows * n, c + i0 * n);
    }
    return;
  }
  if (transposed(tb)) throw std::invalid_argument("batched_gemm: bf16 with op(A) = A^T needs op(B) = B");
  const View2<float> cf = fp32_output(c, m, n, beta, wc);  // blocks of the inner dimension: rows of A and B
  if (k == 0) gemm<float>(ta, tb, alpha, View2<const float>(nullptr, 0, m), View2<const float>(nullptr, 0, n), beta, cf);
  for (index_t t0 = 0; t0 < k; t0 += kWidenedRows) {
    const index_t rows = std::min(kWidenedRows, k - t0);
    gemm<float>(ta, tb, alpha, widened(a + t0 * m, rows, m, wa), widened(b + t0 * n, rows, n, wb),
                t0 == 0 ? beta : 1.0f, cf);
  }
  if constexpr (!std::is_same<C, float>::value) narrow_into(wc, m * n, c);
}

template <class T, class C>
void run_batch(char ta, char tb, Acc<T> alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b,
               Acc<T> beta, const MatrixBatch<C>& c, index_t count) {
  for (index_t i = 0; i < count; ++i) {
    if constexpr (std::is_same<T, bf16>::value) {
      bf16_product<T, C>(ta, tb, alpha, a.data + i * a.stride, b.data + i * b.stride, beta, c.data + i * c.stride,
                         c.rows, c.cols, op_cols(ta, a), b);
    } else {
      gemm<T>(ta, tb, alpha, View2<const T>(a.data + i * a.stride, a.rows, a.cols),
              View2<const T>(b.data + i * b.stride, b.rows, b.cols), beta,
              View2<T>(c.data + i * c.stride, c.rows, c.cols));
    }
  }
}
#endif

}  // namespace

template <class T, class C>
void batched_gemm(char trans_a, char trans_b, Acc<T> alpha, const MatrixBatch<const T>& a,
                  const MatrixBatch<const T>& b, Acc<T> beta, const MatrixBatch<C>& c, index_t count) {
  const index_t depth = op_cols(trans_a, a);
  if (depth != op_rows(trans_b, b) || op_rows(trans_a, a) != c.rows || op_cols(trans_b, b) != c.cols) {
    std::ostringstream os;
    os << "kernels::batched_gemm: shapes do not match: op" << trans_a << "(A) is " << op_rows(trans_a, a) << "x"
       << depth << ", op" << trans_b << "(B) is " << op_rows(trans_b, b) << "x" << op_cols(trans_b, b) << ", C is "
       << c.rows << "x" << c.cols;
    throw std::invalid_argument(os.str());
  }
  if (count == 0 || c.rows == 0 || c.cols == 0) return;
  run_batch<T, C>(trans_a, trans_b, alpha, a, b, beta, c, count);
}

#define MINIATTN_INSTANTIATE_BATCHED_GEMM(T, C)                                                                 \
  template void batched_gemm<T, C>(char, char, Acc<T>, const MatrixBatch<const T>&, const MatrixBatch<const T>&, \
                                   Acc<T>, const MatrixBatch<C>&, index_t);
MINIATTN_INSTANTIATE_BATCHED_GEMM(float, float)
MINIATTN_INSTANTIATE_BATCHED_GEMM(double, double)
MINIATTN_INSTANTIATE_BATCHED_GEMM(bf16, bf16)
MINIATTN_INSTANTIATE_BATCHED_GEMM(bf16, float)
#undef MINIATTN_INSTANTIATE_BATCHED_GEMM

}  // namespace miniattn::kernels
