#include "comm/comm.hpp"

#include "comm/exchange_watch.hpp"
#include "comm/mpi_ranks.hpp"
#include "comm/watched_mpi.hpp"
#include "core/error.hpp"

#if defined(MINIATTN_HAVE_NCCL)
#include "comm/nccl_comm.hpp"
#endif

namespace miniattn {

namespace {

// Runs `exchange` and counts it under label as one call sending bytes_sent.
template <class Run>
void counted(std::map<Exchange, ExchangeStats>& stats, Exchange label, std::uint64_t bytes_sent, Run&& exchange) {
  const double t0 = MPI_Wtime();
  exchange();
  auto& s = stats[label];
  s.seconds += MPI_Wtime() - t0;
  s.calls += 1;
  s.bytes_sent += bytes_sent;
}

// What all-gather and reduce-scatter reduce to on a group of one. The
// two-View deep_copy fences first, so kernels writing `from` have finished.
void copy_in_memory_space(const void* from, void* to, std::size_t bytes) {
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(Bytes(static_cast<char*>(to), bytes), Bytes(static_cast<char*>(const_cast<void*>(from)), bytes));
}

// The blocks this rank sends to the other ranks in an all-to-all, all-gather
// or reduce-scatter: all but its own.
template <class T>
std::uint64_t bytes_to_others(std::size_t count_per_rank, int size) {
  return static_cast<std::uint64_t>(size - 1) * count_per_rank * sizeof(T);
}

}  // namespace

// Records a collective in the flight record, runs and counts it.
template <class Run>
void Comm::collective(Exchange label, ExchangeOp op, MPI_Comm group, std::uint64_t bytes_sent, Run&& exchange) {
  current_entry_ = record_exchange(to_string(label), op, group, bytes_sent);
  counted(stats_, label, bytes_sent, exchange);
  complete_exchange(current_entry_);
}

// Records a post (dest and source: MPI_PROC_NULL where none), lets `post`
// start it, and files its new requests under the entry. The injected fault
// (MINIATTN_FAULT skip_exchange) leaves it out, as a rank on another path would.
template <class Post>
void Comm::point_to_point(Exchange label, MPI_Comm group, std::uint64_t bytes_sent, std::uint64_t bytes, int dest,
                          int source, PendingExchange& pending, Post&& post) {
  if (skip_injected_exchange(to_string(label))) return;
  const ExchangeOp op = dest == MPI_PROC_NULL ? ExchangeOp::recv : source == MPI_PROC_NULL ? ExchangeOp::send
                                                                                         : ExchangeOp::shift;
  const std::uint64_t entry = record_exchange(to_string(label), op, group, bytes, dest, source);
  pending.entries.push_back(entry);
  counted(stats_, label, bytes_sent, [&] {
    post();
    pending.label = label;
  });
  pending.request_entries.resize(pending.requests.size(), entry);
}

template <class T>
void Comm::allreduce_sum(const View1<T>& data, MPI_Comm group, Exchange label) {
  if (size_of(group) == 1 || data.extent(0) == 0) return;
  collective(label, ExchangeOp::allreduce, group, data.extent(0) * sizeof(T),
             [&] { allreduce_sum_impl(data.data(), data.extent(0), scalar_type_of<T>(), group); });
}

double Comm::allreduce_sum(double value, MPI_Comm group, Exchange label) {
  if (size_of(group) == 1) return value;
  double result = 0.0;
  counted(stats_, label, sizeof(double),
          [&] { watched_allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, group, to_string(label)); });
  return result;
}

template <class T>
void Comm::post_shift(const T* send, T* recv, std::size_t count, int dest, int source, MPI_Comm group,
                      Exchange label, PendingExchange& pending) {
  // A shift to itself moves nothing between ranks.
  const std::uint64_t bytes_sent = dest == rank_in(group) ? 0 : count * sizeof(T);
  point_to_point(label, group, bytes_sent, count * sizeof(T), dest, source, pending,
                 [&] { post_shift_impl(send, recv, count, scalar_type_of<T>(), dest, source, group, pending); });
}

template <class T>
void Comm::post_send(const T* send, std::size_t count, int dest, MPI_Comm group, Exchange label,
                     PendingExchange& pending) {
  point_to_point(label, group, count * sizeof(T), count * sizeof(T), dest, MPI_PROC_NULL, pending, [&] {
    post_shift_impl(send, nullptr, count, scalar_type_of<T>(), dest, MPI_PROC_NULL, group, pending);
  });
}

template <class T>
void Comm::post_recv(T* recv, std::size_t count, int source, MPI_Comm group, Exchange label,
                     PendingExchange& pending) {
  point_to_point(label, group, 0, count * sizeof(T), MPI_PROC_NULL, source, pending, [&] {
    post_shift_impl(nullptr, recv, count, scalar_type_of<T>(), MPI_PROC_NULL, source, group, pending);
  });
}

void Comm::wait(PendingExchange& pending) {
  if (pending.active()) {
    const double t0 = MPI_Wtime();
    wait_impl(pending);
    stats_[pending.label].seconds += MPI_Wtime() - t0;
  }
  for (const std::uint64_t entry : pending.entries) complete_exchange(entry);
  pending.requests.clear();
  pending.request_entries.clear();
  pending.entries.clear();
  pending.staged.clear();
  pending.stream_work = false;
  pending.stream_comm = nullptr;
}

template <class T>
void Comm::alltoall(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group, Exchange label) {
  collective(label, ExchangeOp::alltoall, group, bytes_to_others<T>(count_per_rank, size_of(group)),
             [&] { alltoall_impl(send, recv, count_per_rank, scalar_type_of<T>(), group); });
}

template <class T>
void Comm::allgather(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group, Exchange label) {
  const int size = size_of(group);
  if (size == 1) {
    counted(stats_, label, 0, [&] { copy_in_memory_space(send, recv, count_per_rank * sizeof(T)); });
    return;
  }
  collective(label, ExchangeOp::allgather, group, bytes_to_others<T>(count_per_rank, size),
             [&] { allgather_impl(send, recv, count_per_rank, scalar_type_of<T>(), group); });
}

template <class T>
void Comm::reduce_scatter_sum(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group,
                              Exchange label) {
  const int size = size_of(group);
  if (size == 1) {
    counted(stats_, label, 0, [&] { copy_in_memory_space(send, recv, count_per_rank * sizeof(T)); });
    return;
  }
  collective(label, ExchangeOp::reduce_scatter, group, bytes_to_others<T>(count_per_rank, size),
             [&] { reduce_scatter_sum_impl(send, recv, count_per_rank, scalar_type_of<T>(), group); });
}

#define MINIATTN_INSTANTIATE(T)                                                                             \
  template void Comm::allreduce_sum<T>(const View1<T>&, MPI_Comm, Exchange);                      \
  template void Comm::post_shift<T>(const T*, T*, std::size_t, int, int, MPI_Comm, Exchange,      \
                                    PendingExchange&);                                                      \
  template void Comm::post_send<T>(const T*, std::size_t, int, MPI_Comm, Exchange, PendingExchange&); \
  template void Comm::post_recv<T>(T*, std::size_t, int, MPI_Comm, Exchange, PendingExchange&);       \
  template void Comm::alltoall<T>(const T*, T*, std::size_t, MPI_Comm, Exchange);                 \
  template void Comm::allgather<T>(const T*, T*, std::size_t, MPI_Comm, Exchange);                \
  template void Comm::reduce_scatter_sum<T>(const T*, T*, std::size_t, MPI_Comm, Exchange);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE
// bf16 activations travel (and are all-reduced: TP's row-parallel outputs
// without sequence parallelism); gradients are fp32.
template void Comm::allreduce_sum<bf16>(const View1<bf16>&, MPI_Comm, Exchange);
template void Comm::post_shift<bf16>(const bf16*, bf16*, std::size_t, int, int, MPI_Comm, Exchange,
                                     PendingExchange&);
template void Comm::post_send<bf16>(const bf16*, std::size_t, int, MPI_Comm, Exchange, PendingExchange&);
template void Comm::post_recv<bf16>(bf16*, std::size_t, int, MPI_Comm, Exchange, PendingExchange&);
template void Comm::alltoall<bf16>(const bf16*, bf16*, std::size_t, MPI_Comm, Exchange);
template void Comm::allgather<bf16>(const bf16*, bf16*, std::size_t, MPI_Comm, Exchange);
template void Comm::reduce_scatter_sum<bf16>(const bf16*, bf16*, std::size_t, MPI_Comm, Exchange);

std::unique_ptr<Comm> make_comm(CommBackend backend, MPI_Comm world, GpuAwareMpi gpu_aware_mpi) {
  if (backend == CommBackend::mpi) return std::make_unique<MpiComm>(mpi_needs_host_staging(gpu_aware_mpi, world));
#if defined(MINIATTN_HAVE_NCCL)
  if (backend == CommBackend::nccl) return std::make_unique<NcclComm>();
#endif
  throw InputError(std::string("parallel.comm: '") + to_string(backend) + "' is not built into this executable");
}

}  // namespace miniattn
