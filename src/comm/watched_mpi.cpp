#include "comm/watched_mpi.hpp"

#include "comm/exchange_watch.hpp"

namespace miniattn {

namespace {

std::uint64_t bytes_of(int count, MPI_Datatype type) {
  int size = 0;
  MPI_Type_size(type, &size);
  return static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(size);
}

// Records the collective, lets `post` start it, waits for it.
template <class Post>
void watched(const char* label, ExchangeOp op, MPI_Comm comm, std::uint64_t bytes, Post&& post) {
  std::uint64_t entry = record_exchange(label, op, comm, bytes);
  MPI_Request request;
  post(&request);
  wait_for_requests(&request, &entry, 1);
}

}  // namespace

void watched_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       const char* label) {
  watched(label, ExchangeOp::allreduce, comm, bytes_of(count, type),
          [&](MPI_Request* r) { MPI_Iallreduce(send, recv, count, type, op, comm, r); });
}

void watched_bcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* label) {
  watched(label, ExchangeOp::bcast, comm, bytes_of(count, type),
          [&](MPI_Request* r) { MPI_Ibcast(data, count, type, root, comm, r); });
}

void watched_barrier(MPI_Comm comm, const char* label) {
  watched(label, ExchangeOp::barrier, comm, 0, [&](MPI_Request* r) { MPI_Ibarrier(comm, r); });
}

void watched_allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm,
                       const char* label) {
  watched(label, ExchangeOp::allgather, comm, bytes_of(count, type),
          [&](MPI_Request* r) { MPI_Iallgather(send, count, type, recv, count, type, comm, r); });
}

void watched_allgatherv(const void* send, int count, MPI_Datatype type, void* recv, const int* counts,
                        const int* displacements, MPI_Comm comm, const char* label) {
  watched(label, ExchangeOp::allgather, comm, bytes_of(count, type), [&](MPI_Request* r) {
    MPI_Iallgatherv(send, count, type, recv, counts, displacements, type, comm, r);
  });
}

}  // namespace miniattn
