#include "comm/comm.hpp"

#include "core/error.hpp"

#if defined(MINIATTN_HAVE_NCCL)
#include "comm/nccl_comm.hpp"
#endif

namespace miniattn {

namespace {

int group_size(MPI_Comm group) {
  int size = 1;
  MPI_Comm_size(group, &size);
  return size;
}

}  // namespace

template <class T>
void Comm::allreduce_sum(const View1<T>& data, MPI_Comm group, const std::string& label) {
  if (group_size(group) == 1 || data.extent(0) == 0) return;
  const double t0 = MPI_Wtime();
  allreduce_sum_impl(data.data(), data.extent(0), scalar_type_of<T>(), group);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += data.extent(0) * sizeof(T);
}

double Comm::allreduce_sum(double value, MPI_Comm group, const std::string& label) {
  if (group_size(group) == 1) return value;
  const double t0 = MPI_Wtime();
  double result = 0.0;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, group);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += sizeof(double);
  return result;
}

template <class T>
void Comm::post_shift(const T* send, T* recv, std::size_t count, int dest, int source, MPI_Comm group,
                      const std::string& label, PendingExchange& pending) {
  const double t0 = MPI_Wtime();
  post_shift_impl(send, recv, count, scalar_type_of<T>(), dest, source, group, pending);
  pending.label = label;
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  if (dest != rank) s.bytes_sent += count * sizeof(T);  // a shift to itself moves nothing between ranks
}

void Comm::wait(PendingExchange& pending) {
  if (!pending.active()) return;
  const double t0 = MPI_Wtime();
  wait_impl(pending);
  stats_[pending.label].seconds += MPI_Wtime() - t0;
  pending.requests.clear();
  pending.staged.clear();
  pending.stream_work = false;
}

template <class T>
void Comm::alltoall(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group, const std::string& label) {
  const double t0 = MPI_Wtime();
  alltoall_impl(send, recv, count_per_rank, scalar_type_of<T>(), group);
  auto& s = stats_[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += static_cast<std::uint64_t>(group_size(group) - 1) * count_per_rank * sizeof(T);
}

#define MINIATTN_INSTANTIATE(T)                                                                             \
  template void Comm::allreduce_sum<T>(const View1<T>&, MPI_Comm, const std::string&);                      \
  template void Comm::post_shift<T>(const T*, T*, std::size_t, int, int, MPI_Comm, const std::string&,      \
                                    PendingExchange&);                                                      \
  template void Comm::alltoall<T>(const T*, T*, std::size_t, MPI_Comm, const std::string&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

std::unique_ptr<Comm> make_comm(CommBackend backend, MPI_Comm world, GpuAwareMpi gpu_aware_mpi) {
  if (backend == CommBackend::mpi) return std::make_unique<MpiComm>(mpi_needs_host_staging(gpu_aware_mpi, world));
#if defined(MINIATTN_HAVE_NCCL)
  if (backend == CommBackend::nccl) return std::make_unique<NcclComm>();
#endif
  throw InputError(std::string("parallel.comm: '") + to_string(backend) + "' is not built into this executable");
}

}  // namespace miniattn
