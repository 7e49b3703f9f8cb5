#include "comm/comm.hpp"

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
}  // namespace

template <class T>
void Comm::allreduce_sum(const View1<T>& data, MPI_Comm comm, const std::string& label) {
  if (comm_size(comm) == 1 || data.extent(0) == 0) return;
  compat::fence("miniattn::Comm::allreduce_sum");
  const double t0 = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.extent(0)), mpi_type<T>(), MPI_SUM, comm);
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

template void Comm::allreduce_sum<float>(const View1<float>&, MPI_Comm, const std::string&);
template void Comm::allreduce_sum<double>(const View1<double>&, MPI_Comm, const std::string&);

}  // namespace miniattn
