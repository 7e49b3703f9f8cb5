#include <limits>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn {

namespace {

MPI_Datatype mpi_type(ScalarType type) { return type == ScalarType::f32 ? MPI_FLOAT : MPI_DOUBLE; }

int mpi_count(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw RuntimeFailure("a message of " + std::to_string(count) +
                         " elements exceeds MPI's int count; use more ranks or a shorter sequence");
  return static_cast<int>(count);
}

}  // namespace

void MpiComm::allreduce_sum_impl(void* data, std::size_t count, ScalarType type, MPI_Comm group) {
  compat::fence("miniattn::MpiComm::allreduce_sum");
  MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count), mpi_type(type), MPI_SUM, group);
}

void MpiComm::post_shift_impl(const void* send, void* recv, std::size_t count, ScalarType type, int dest,
                              int source, MPI_Comm group, PendingExchange& pending) {
  compat::fence("miniattn::MpiComm::post_shift");
  MPI_Request reqs[2];
  MPI_Irecv(recv, mpi_count(count), mpi_type(type), source, 0, group, &reqs[0]);
  MPI_Isend(send, mpi_count(count), mpi_type(type), dest, 0, group, &reqs[1]);
  pending.requests.push_back(reqs[0]);
  pending.requests.push_back(reqs[1]);
}

void MpiComm::wait_impl(PendingExchange& pending) {
  MPI_Waitall(static_cast<int>(pending.requests.size()), pending.requests.data(), MPI_STATUSES_IGNORE);
}

void MpiComm::alltoall_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                            MPI_Comm group) {
  compat::fence("miniattn::MpiComm::alltoall");
  MPI_Alltoall(send, mpi_count(count_per_rank), mpi_type(type), recv, mpi_count(count_per_rank), mpi_type(type),
               group);
}

}  // namespace miniattn
