#include "kernels/base/batched_gemm.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/base/gemm.hpp"
#include "kernels/base/head_batches.hpp"
#include "kernels/base/onednn_gemm.hpp"
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
template <class = void>  // a template: device builds, which never call it, do not warn about it
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
  // Dependent on T, so checked where instantiated (clang checks one that is not at its definition).
  static_assert(sizeof(T) != 0 && kHostExecution,
                "host bf16 GEMMs widen into host memory: device backends take device_bf16_batch");
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
#endif

// Device bf16 off CUDA (HIP; SYCL alike): Kokkos Kernels has no bf16 GEMM
// (its own kernels and its rocBLAS TPL take fp32/fp64), so the operands are
// widened to fp32 in device memory, one kernel per operand for a group of
// products, each product is one fp32 kernels::gemm (KokkosBlas: Kokkos
// Kernels' own team GEMM, or rocBLAS's sgemm in a Kokkos Kernels built with
// its rocBLAS TPL), and a bf16 C is rounded back once by one more kernel.
// The same products to rounding as the host path. Not fast: two to three
// widening passes and one GEMM launch per product, on the fp32 units; rocBLAS's
// gemm_strided_batched_ex (bf16 in, fp32 compute, one call a batch, the
// matrix cores) would be the fast path, and is not built (Debian has no
// rocBLAS to build it against). The widened copies live in three device Views
// that grow to the largest group (at most kDeviceWidenedValues values in all,
// plus a whole widened B for products larger than that) and are kept until
// Kokkos finalizes, outside the memory plan's Views. Compiled in every build:
// the host tests run it (batched_gemm_bf16_widened) against the host path.

using DeviceFloats = View1<float>;
struct DeviceWidened {
  DeviceFloats a, b, c;
};
DeviceWidened& device_widened() {
  static DeviceWidened buffers;
  static const bool hooked = [] {
    Kokkos::push_finalize_hook([] { buffers = DeviceWidened{}; });  // freed while Kokkos can still free them
    return true;
  }();
  (void)hooked;
  return buffers;
}

// `buffer`, grown to hold `count` values (not kept: the old values are not needed).
float* at_least(DeviceFloats& buffer, index_t count) {
  if (static_cast<index_t>(buffer.extent(0)) < count) {
    buffer = DeviceFloats();
    buffer = DeviceFloats(Kokkos::view_alloc(Kokkos::WithoutInitializing, "miniattn::bf16_widened"),
                          static_cast<std::size_t>(count));
  }
  return buffer.data();
}

using DeviceRange = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;

// Matrices [first, first + count) of x widened into `to`, packed: matrix j at j * rows * cols.
template <class T>
void widen_matrices(const MatrixBatch<const T>& x, index_t first, index_t count, float* to) {
  const index_t size = x.rows * x.cols, stride = x.stride;
  const T* from = x.data + first * stride;
  Kokkos::parallel_for(
      "miniattn::batched_gemm_widen", DeviceRange(0, count * size), KOKKOS_LAMBDA(const index_t j) {
        const index_t matrix = j / size;
        to[j] = widen(from[matrix * stride + (j - matrix * size)]);
      });
}

// The reverse for C: packed fp32 matrices rounded into matrices [first, first + count) of x.
template <class C>
void narrow_matrices(const float* from, index_t first, index_t count, const MatrixBatch<C>& x) {
  const index_t size = x.rows * x.cols, stride = x.stride;
  C* to = x.data + first * stride;
  Kokkos::parallel_for(
      "miniattn::batched_gemm_narrow", DeviceRange(0, count * size), KOKKOS_LAMBDA(const index_t j) {
        const index_t matrix = j / size;
        to[matrix * stride + (j - matrix * size)] = narrow<C>(from[j]);
      });
}

// Where a product into C computes: C itself when it is fp32, else the widened copy.
template <class C>
float* fp32_target(C* c, float* widened_c) {
  if constexpr (std::is_same<C, float>::value) {
    (void)widened_c;
    return c;
  } else {
    (void)c;
    return widened_c;
  }
}

// Rows [first, first + rows) of matrix i of x, as a batch of one.
template <class T>
MatrixBatch<T> row_block(const MatrixBatch<T>& x, index_t i, index_t first, index_t rows) {
  return {x.data + i * x.stride + first * x.cols, rows, x.cols, x.stride};
}

// One product larger than kDeviceWidenedValues, in row blocks as on the host:
// op(A) = A: blocks of A's and C's rows against all of B; op(A) = A^T: blocks
// of the inner dimension (rows of A and B) accumulated into all of C.
template <class C>
void device_bf16_product(char ta, char tb, float alpha, const MatrixBatch<const bf16>& a,
                         const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t i,
                         index_t widened_values) {
  constexpr bool fp32_c = std::is_same<C, float>::value;
  DeviceWidened& w = device_widened();
  const index_t m = c.rows, n = c.cols, k = op_cols(ta, a);
  if (!transposed(ta)) {
    float* wb = at_least(w.b, b.rows * b.cols);
    widen_matrices(b, i, 1, wb);
    const View2<const float> bf(wb, b.rows, b.cols);
    const index_t block = std::max<index_t>(1, widened_values / std::max<index_t>(1, k + n));
    for (index_t i0 = 0; i0 < m; i0 += block) {
      const index_t rows = std::min(block, m - i0);
      float* wa = at_least(w.a, rows * k);
      widen_matrices(row_block(a, i, i0, rows), 0, 1, wa);
      const MatrixBatch<C> cb = row_block(c, i, i0, rows);
      float* wc = fp32_c ? nullptr : at_least(w.c, rows * n);
      if constexpr (!fp32_c) {
        if (beta != 0.0f) widen_matrices(read_only(cb), 0, 1, wc);  // beta 0: C is overwritten, never read
      }
      const View2<float> cf(fp32_target(cb.data, wc), rows, n);
      gemm<float>(ta, tb, alpha, View2<const float>(wa, rows, k), bf, beta, cf);
      if constexpr (!fp32_c) narrow_matrices(wc, 0, 1, cb);
    }
    return;
  }
  if (transposed(tb)) throw std::invalid_argument("batched_gemm: bf16 with op(A) = A^T needs op(B) = B");
  const MatrixBatch<C> ci = row_block(c, i, 0, m);
  float* wc = fp32_c ? nullptr : at_least(w.c, m * n);
  if constexpr (!fp32_c) {
    if (beta != 0.0f) widen_matrices(read_only(ci), 0, 1, wc);
  }
  const View2<float> cf(fp32_target(ci.data, wc), m, n);
  const index_t block = std::max<index_t>(1, widened_values / std::max<index_t>(1, m + n));
  for (index_t t0 = 0; t0 < k; t0 += block) {
    const index_t rows = std::min(block, k - t0);
    float* wa = at_least(w.a, rows * m);
    float* wb = at_least(w.b, rows * n);
    widen_matrices(row_block(a, i, t0, rows), 0, 1, wa);
    widen_matrices(row_block(b, i, t0, rows), 0, 1, wb);
    gemm<float>(ta, tb, alpha, View2<const float>(wa, rows, m), View2<const float>(wb, rows, n),
                t0 == 0 ? beta : 1.0f, cf);
  }
  if constexpr (!fp32_c) narrow_matrices(wc, 0, 1, ci);
}

// All `count` products: groups of whole products whose widened operands fit
// widened_values, each group widened by one kernel an operand; larger
// products one by one in row blocks (device_bf16_product).
template <class C>
void device_bf16_batch(char ta, char tb, float alpha, const MatrixBatch<const bf16>& a,
                       const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count,
                       index_t widened_values) {
  constexpr bool fp32_c = std::is_same<C, float>::value;
  const index_t sa = a.rows * a.cols, sb = b.rows * b.cols, sc = c.rows * c.cols;
  const index_t per_product = sa + sb + (fp32_c ? 0 : sc);
  if (per_product > widened_values) {
    for (index_t i = 0; i < count; ++i) device_bf16_product<C>(ta, tb, alpha, a, b, beta, c, i, widened_values);
    return;
  }
  const index_t group = std::min(count, widened_values / per_product);
  DeviceWidened& w = device_widened();
  for (index_t i0 = 0; i0 < count; i0 += group) {
    const index_t g = std::min(group, count - i0);
    float* wa = at_least(w.a, g * sa);
    float* wb = at_least(w.b, g * sb);
    float* wc = fp32_c ? nullptr : at_least(w.c, g * sc);
    widen_matrices(a, i0, g, wa);
    widen_matrices(b, i0, g, wb);
    if constexpr (!fp32_c) {
      if (beta != 0.0f) widen_matrices(read_only(c), i0, g, wc);  // beta 0: C is overwritten, never read
    }
    for (index_t j = 0; j < g; ++j) {
      float* cj = fp32_target(c.data + (i0 + j) * c.stride, fp32_c ? nullptr : wc + j * sc);
      gemm<float>(ta, tb, alpha, View2<const float>(wa + j * sa, a.rows, a.cols),
                  View2<const float>(wb + j * sb, b.rows, b.cols), beta, View2<float>(cj, c.rows, c.cols));
    }
    if constexpr (!fp32_c) narrow_matrices(wc, i0, g, c);
  }
}

#if !defined(KOKKOS_ENABLE_CUDA)
template <class T, class C>
void run_batch(char ta, char tb, Acc<T> alpha, const MatrixBatch<const T>& a, const MatrixBatch<const T>& b,
               Acc<T> beta, const MatrixBatch<C>& c, index_t count) {
  if constexpr (std::is_same<T, bf16>::value && !kHostExecution) {
    device_bf16_batch<C>(ta, tb, alpha, a, b, beta, c, count, kDeviceWidenedValues);
  } else if (std::is_same<T, bf16>::value && onednn_bf16_gemm_used() && op_cols(ta, a) > 0) {
    if constexpr (std::is_same<T, bf16>::value) onednn_bf16_batch<C>(ta, tb, alpha, a, b, beta, c, count);
  } else {
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

template <class C>
void batched_gemm_bf16_widened(char trans_a, char trans_b, float alpha, const MatrixBatch<const bf16>& a,
                               const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count,
                               index_t widened_values) {
  if (count == 0 || c.rows == 0 || c.cols == 0) return;
  device_bf16_batch<C>(trans_a, trans_b, alpha, a, b, beta, c, count, std::max<index_t>(1, widened_values));
}
template void batched_gemm_bf16_widened<bf16>(char, char, float, const MatrixBatch<const bf16>&,
                                              const MatrixBatch<const bf16>&, float, const MatrixBatch<bf16>&, index_t,
                                              index_t);
template void batched_gemm_bf16_widened<float>(char, char, float, const MatrixBatch<const bf16>&,
                                               const MatrixBatch<const bf16>&, float, const MatrixBatch<float>&,
                                               index_t, index_t);

#define MINIATTN_INSTANTIATE_BATCHED_GEMM(T, C)                                                                 \
  template void batched_gemm<T, C>(char, char, Acc<T>, const MatrixBatch<const T>&, const MatrixBatch<const T>&, \
                                   Acc<T>, const MatrixBatch<C>&, index_t);
MINIATTN_INSTANTIATE_BATCHED_GEMM(float, float)
MINIATTN_INSTANTIATE_BATCHED_GEMM(double, double)
MINIATTN_INSTANTIATE_BATCHED_GEMM(bf16, bf16)
MINIATTN_INSTANTIATE_BATCHED_GEMM(bf16, float)
#undef MINIATTN_INSTANTIATE_BATCHED_GEMM

}  // namespace miniattn::kernels
