#pragma once
// Internal to src/kernels: the operands of a batched GEMM over the heads of
// [B, heads, n, Dh] tensors (LayoutRight, contiguous), for the attention
// kernels that run through GEMMs (chunked_attention.cpp, dense_attention.cpp).
// One batch runs over every (sample, K/V head) pair; a K/V head's group of
// G = H / KV query heads (GQA) is G batches, member g of the group being query
// head h = kh G + g. A score block of query head h of sample b is entry
// b H + h of a [B H, rows, cols] array.
#include "kernels/base/batched_gemm.hpp"

namespace miniattn::kernels {

// Rows [first, first + rows) of each (sample, K/V head) of a tensor with n rows
// per head, for group member g (K/V tensors: group 1, g 0).
template <class T>
MatrixBatch<T> head_rows(T* data, index_t n, index_t dh, index_t group, index_t g, index_t first, index_t rows) {
  return {data + (g * n + first) * dh, rows, dh, group * n * dh};
}

// Group member g's [rows, cols] score blocks.
template <class T>
MatrixBatch<T> score_blocks(T* data, index_t group, index_t g, index_t rows, index_t cols) {
  return {data + g * rows * cols, rows, cols, group * rows * cols};
}

template <class T>
MatrixBatch<const T> read_only(const MatrixBatch<T>& m) {
  return {m.data, m.rows, m.cols, m.stride};
}

}  // namespace miniattn::kernels
