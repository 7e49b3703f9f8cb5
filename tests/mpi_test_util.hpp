#pragma once
// Rank and size queries shared by the tests that run under mpiexec (the
// mini-app's own, comm/mpi_ranks.hpp, plus the world's).
#include <mpi.h>

#include "comm/mpi_ranks.hpp"

namespace miniattn::mpitest {

using miniattn::rank_in;
using miniattn::size_of;

inline int world_rank() { return rank_in(MPI_COMM_WORLD); }
inline int world_size() { return size_of(MPI_COMM_WORLD); }
inline void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace miniattn::mpitest
