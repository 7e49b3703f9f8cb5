#pragma once
// MPI's blocking calls that the code makes outside the Comm interface (the
// agreements of comm/agree.hpp, the pipeline's barriers, the report's
// reductions, the files' small exchanges), as their nonblocking forms finished
// by the exchange watch: each has the deadline and a flight-record entry.
#include <mpi.h>

namespace miniattn {

void watched_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       const char* label);
void watched_bcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* label);
void watched_barrier(MPI_Comm comm, const char* label);
void watched_allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm,
                       const char* label);
void watched_allgatherv(const void* send, int count, MPI_Datatype type, void* recv, const int* counts,
                        const int* displacements, MPI_Comm comm, const char* label);

}  // namespace miniattn
