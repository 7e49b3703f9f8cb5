#pragma once
// Rank and size queries shared by the tests that run under mpiexec.
#include <mpi.h>

namespace miniattn::mpitest {

inline int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

inline int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

inline int world_rank() { return rank_of(MPI_COMM_WORLD); }
inline int world_size() { return size_of(MPI_COMM_WORLD); }
inline void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace miniattn::mpitest
