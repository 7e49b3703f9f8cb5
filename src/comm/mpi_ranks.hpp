#pragma once
// This process's rank in a communicator and the communicator's size, as values.
#include <mpi.h>

namespace miniattn {

inline int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

inline int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

}  // namespace miniattn
