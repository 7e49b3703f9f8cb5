#pragma once
// A rank's tensor-parallel group as the model sees it (Megatron-LM tensor
// parallelism, docs/design.md section 3.1a). Every rank holds all rows in the
// column-parallel regions (QKV, attention, fc1, gelu) for its heads and FFN
// units. In the LayerNorm and residual regions:
//  * with sequence parallelism (Korthikanti et al. 2022), a contiguous chunk
//    of the rows: an all-gather of the chunk before each column-parallel GEMM
//    (and of the output gradient before each row-parallel GEMM's backward), a
//    reduce-scatter of each row-parallel GEMM's partial output (and of the
//    input gradient of each column-parallel GEMM);
//  * without it (2021's Megatron), all rows, replicated on every rank: the
//    "chunk" is all rows (the caller passes one View as both), the gather is
//    nothing and the reduce-scatter an all-reduce.
// With size 1 neither exchanges: the chunk is all rows.
#include <mpi.h>

#include <string>

#include "comm/comm.hpp"
#include "core/types.hpp"

namespace miniattn {

struct TensorParallelGroup {
  Comm* comm = nullptr;
  MPI_Comm group = MPI_COMM_NULL;
  int rank = 0, size = 1;
  bool sequence_parallel = true;

  // Whether a rank holds a chunk of the rows, not all of them.
  bool splits_rows() const { return size > 1 && sequence_parallel; }
  // rows: all rows of the group; this rank's chunk is [first_row(rows), + chunk_rows(rows)).
  index_t chunk_rows(index_t rows) const { return splits_rows() ? rows / size : rows; }
  index_t first_row(index_t rows) const { return splits_rows() ? rank * chunk_rows(rows) : 0; }

  // all_rows = the chunks of every rank, in rank order (without sequence
  // parallelism they are one View: nothing to do).
  template <class T>
  void gather_rows(const View2<T>& chunk, const View2<T>& all_rows) const {
    if (splits_rows()) comm->allgather(chunk.data(), all_rows.data(), chunk.span(), group,
                                       Exchange::tensor_parallel_gather);
  }
  // chunk = this rank's rows of the sum over ranks of all_rows (without
  // sequence parallelism, all of them: an all-reduce in place).
  template <class T>
  void reduce_scatter_rows(const View2<T>& all_rows, const View2<T>& chunk) const {
    if (splits_rows())
      comm->reduce_scatter_sum(all_rows.data(), chunk.data(), chunk.span(), group,
                               Exchange::tensor_parallel_reduce_scatter);
    else if (size > 1)
      comm->allreduce_sum(View1<T>(chunk.data(), chunk.span()), group, Exchange::tensor_parallel_allreduce);
  }
  // A row-parallel layer's bias belongs to the partial sum of rank 0 only.
  template <class View>
  View on_first_rank(const View& bias) const {
    return rank == 0 ? bias : View();
  }
  // The gradient of a row-parallel layer's bias: with sequence parallelism
  // rank 0's (the ranks' replicated gradients are summed over TP); without
  // it every rank's, from the same rows (they are summed over DP x SP only).
  template <class View>
  View bias_gradient(const View& gradient) const {
    return sequence_parallel ? on_first_rank(gradient) : gradient;
  }
};

}  // namespace miniattn
