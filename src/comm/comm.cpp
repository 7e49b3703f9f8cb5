#include "comm/comm.hpp"

#include <limits>
#include <stdexcept>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn {

namespace {
template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

int comm_size(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

int mpi_count(std::size_t count, const std::string& label) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw RuntimeFailure(label + ": a message of " + std::to_string(count) +
                         " elements exceeds MPI's int count; use more ranks or a shorter sequence");
  return static_cast<int>(count);
}
}  // namespace

template <class T>
void Comm::allreduce_sum(const View1<T>& data, MPI_Comm comm, const std::string& label) {
  if (comm_size(comm) == 1 || data.extent(0) == 0) return;
  compat::fence("miniattn::Comm::allreduce_sum");
  const double t0 = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, data.data(), mpi_count(data.extent(0), label), mpi_type<T>(), MPI_SUM, comm);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += data.extent(0) * sizeof(T);
}

double Comm::allreduce_sum(double value, MPI_Comm comm, const std::string& label) {
  if (comm_size(comm) == 1) return value;
  const double t0 = MPI_Wtime();
  double result = 0.0;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, comm);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += sizeof(double);
  return result;
}

template <class T>
void Comm::post_shift(const T* send, T* recv, std::size_t count, int dest, int source, MPI_Comm comm,
                      const std::string& label, PendingExchange& pending) {
  compat::fence("miniattn::Comm::post_shift");
  const double t0 = MPI_Wtime();
  const int n = mpi_count(count, label);
  MPI_Request reqs[2];
  MPI_Irecv(recv, n, mpi_type<T>(), source, 0, comm, &reqs[0]);
  MPI_Isend(send, n, mpi_type<T>(), dest, 0, comm, &reqs[1]);
  pending.requests_.push_back(reqs[0]);
  pending.requests_.push_back(reqs[1]);
  pending.label_ = label;
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += count * sizeof(T);
}

void Comm::wait(PendingExchange& pending) {
  if (pending.requests_.empty()) return;
  const double t0 = MPI_Wtime();
  MPI_Waitall(static_cast<int>(pending.requests_.size()), pending.requests_.data(), MPI_STATUSES_IGNORE);
  stats_[pending.label_].seconds += MPI_Wtime() - t0;
  pending.requests_.clear();
}

template <class T>
void Comm::alltoall(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm comm, const std::string& label) {
  const int p = comm_size(comm);
  compat::fence("miniattn::Comm::alltoall");
  const double t0 = MPI_Wtime();
  const int n = mpi_count(count_per_rank, label);
  MPI_Alltoall(send, n, mpi_type<T>(), recv, n, mpi_type<T>(), comm);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += static_cast<std::uint64_t>(p - 1) * count_per_rank * sizeof(T);
}

#define MINIATTN_INSTANTIATE(T)                                                                              \
  template void Comm::allreduce_sum<T>(const View1<T>&, MPI_Comm, const std::string&);                       \
  template void Comm::post_shift<T>(const T*, T*, std::size_t, int, int, MPI_Comm, const std::string&,       \
                                    PendingExchange&);                                                       \
  template void Comm::alltoall<T>(const T*, T*, std::size_t, MPI_Comm, const std::string&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn
