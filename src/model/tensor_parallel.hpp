#pragma once
// A rank's tensor-parallel group as the model sees it (Megatron-LM tensor
// parallelism with its sequence parallelism, docs/design.md section 3): each
// rank holds a contiguous chunk of the group's rows in the LayerNorm and
// residual regions, all rows in the column-parallel regions (QKV, attention,
// fc1, gelu) for its heads and FFN units. The exchanges between them:
//  * all-gather of a row chunk before each column-parallel GEMM (and of the
//    output gradient before each row-parallel GEMM's backward);
//  * reduce-scatter of each row-parallel GEMM's partial output (and of the
//    input gradient of each column-parallel GEMM).
// With size 1 neither exchanges: the "chunk" is all rows and the caller passes
// the same View as chunk and as all rows.
#include <mpi.h>

#include <string>

#include "comm/comm.hpp"
#include "core/types.hpp"

namespace miniattn {

struct TensorParallelGroup {
  Comm* comm = nullptr;
  MPI_Comm group = MPI_COMM_NULL;
  int rank = 0, size = 1;

  // rows: all rows of the group; this rank's chunk is [first_row(rows), + chunk_rows(rows)).
  index_t chunk_rows(index_t rows) const { return rows / size; }
  index_t first_row(index_t rows) const { return rank * chunk_rows(rows); }

  // all_rows = the chunks of every rank, in rank order.
  template <class T>
  void gather_rows(const View2<T>& chunk, const View2<T>& all_rows, Exchange label) const {
    if (size > 1) comm->allgather(chunk.data(), all_rows.data(), chunk.span(), group, label);
  }
  // chunk = this rank's rows of the sum over ranks of all_rows.
  template <class T>
  void reduce_scatter_rows(const View2<T>& all_rows, const View2<T>& chunk, Exchange label) const {
    if (size > 1) comm->reduce_scatter_sum(all_rows.data(), chunk.data(), chunk.span(), group, label);
  }
  // A row-parallel layer's bias (or its gradient) belongs to the partial sum of rank 0 only.
  template <class View>
  View on_first_rank(const View& bias) const {
    return rank == 0 ? bias : View();
  }
};

}  // namespace miniattn
