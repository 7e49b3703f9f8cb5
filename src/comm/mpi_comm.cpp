#include <mpi.h>

#include <limits>

// Open MPI's MPIX_Query_cuda_support. Only when mpi.h is Open MPI's: a machine
// may have Open MPI's headers installed beside the MPICH this build uses, and
// its mpi-ext.h does not compile against MPICH's mpi.h.
#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include "comm/comm.hpp"
#include "comm/exchange_watch.hpp"
#include "comm/mpi_ranks.hpp"
#include "comm/watched_mpi.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn {

namespace {

MPI_Datatype mpi_type(ScalarType type) {
  return type == ScalarType::f32 ? MPI_FLOAT : type == ScalarType::f64 ? MPI_DOUBLE : MPI_UINT16_T;
}

// MPI has no bf16 sum: each element widened to fp32, added, rounded once.
void sum_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = bf16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

MPI_Op mpi_sum(ScalarType type) {
  if (type != ScalarType::bf16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op created;
    MPI_Op_create(&sum_bf16, 1, &created);
    return created;
  }();
  return op;
}

// A bf16 sum runs on the host (its MPI_Op reads host memory): device data is staged for it.
bool stage_sum(bool staged, ScalarType type) { return staged || (type == ScalarType::bf16 && !kHostExecution); }

int mpi_count(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw RuntimeFailure("a message of " + std::to_string(count) +
                         " elements exceeds MPI's int count; use more ranks or a shorter sequence");
  return static_cast<int>(count);
}

using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using MemBytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Uninitialised: every byte is written by the copy or the receive.
std::unique_ptr<char[]> host_copy_of(const void* data, std::size_t bytes) {
  std::unique_ptr<char[]> host(new char[bytes]);
  Kokkos::deep_copy(HostBytes(host.get(), bytes), MemBytes(static_cast<char*>(const_cast<void*>(data)), bytes));
  return host;
}

void copy_to_memory_space(void* data, const char* host, std::size_t bytes) {
  Kokkos::deep_copy(MemBytes(static_cast<char*>(data), bytes), HostBytes(const_cast<char*>(host), bytes));
}

// Runs the out-of-place collective `call(send, recv)` on the caller's buffers
// or, when staging, on host copies: send_bytes of send go to the host first,
// recv_bytes of the result come back after.
template <class Collective>
void out_of_place(bool staged, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                  Collective&& call) {
  if (!staged) {
    call(send, recv);
    return;
  }
  const std::unique_ptr<char[]> host_send = host_copy_of(send, send_bytes);
  const std::unique_ptr<char[]> host_recv(new char[recv_bytes]);
  call(host_send.get(), host_recv.get());
  copy_to_memory_space(recv, host_recv.get(), recv_bytes);
}

// What the MPI library says about device memory of this build's kind; false when it cannot say.
bool mpi_reports_device_support() {
  int supported = 0;
#if defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  supported = MPIX_Query_cuda_support();
#elif defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_GPU_SUPPORT_CUDA)
  MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported);
#elif defined(KOKKOS_ENABLE_HIP) && defined(MPIX_GPU_SUPPORT_HIP)
  MPIX_GPU_query_support(MPIX_GPU_SUPPORT_HIP, &supported);
#elif defined(KOKKOS_ENABLE_SYCL) && defined(MPIX_GPU_SUPPORT_ZE)
  MPIX_GPU_query_support(MPIX_GPU_SUPPORT_ZE, &supported);
#endif
  return supported != 0;
}

// Finishes the one request of the collective `entry` (the exchange watch's wait: its deadline, its record).
void finish(MPI_Request request, std::uint64_t entry) { wait_for_requests(&request, &entry, 1); }

}  // namespace

bool mpi_needs_host_staging(GpuAwareMpi gpu_aware_mpi, MPI_Comm world) {
  constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  int needed = 0;
  if (gpu_aware_mpi == GpuAwareMpi::no) needed = 1;  // on host memory too: the path is then testable anywhere
  else if (gpu_aware_mpi == GpuAwareMpi::automatic) needed = !host_memory && !mpi_reports_device_support();
  int agreed = needed;
  watched_allreduce(&needed, &agreed, 1, MPI_INT, MPI_MAX, world, "setup.host_staging");
  return agreed != 0;
}

void MpiComm::allreduce_sum_impl(void* data, std::size_t count, ScalarType type, MPI_Comm group) {
  compat::fence("miniattn::MpiComm::allreduce_sum");
  MPI_Request request;
  if (!stage_sum(staged_, type)) {
    MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(count), mpi_type(type), mpi_sum(type), group, &request);
    finish(request, current_entry());
    return;
  }
  const std::size_t bytes = count * bytes_of(type);
  const std::unique_ptr<char[]> host = host_copy_of(data, bytes);
  MPI_Iallreduce(MPI_IN_PLACE, host.get(), mpi_count(count), mpi_type(type), mpi_sum(type), group, &request);
  finish(request, current_entry());
  copy_to_memory_space(data, host.get(), bytes);
}

void MpiComm::post_shift_impl(const void* send, void* recv, std::size_t count, ScalarType type, int dest,
                              int source, MPI_Comm group, PendingExchange& pending) {
  compat::fence("miniattn::MpiComm::post_shift");
  if (staged_) {
    HostStaging s;
    s.bytes = count * bytes_of(type);
    if (dest != MPI_PROC_NULL) s.send = host_copy_of(send, s.bytes);
    if (source != MPI_PROC_NULL) {
      s.recv.reset(new char[s.bytes]);
      s.device_recv = recv;
    }
    send = s.send.get();
    recv = s.recv.get();
    pending.staged.push_back(std::move(s));
  }
  if (source != MPI_PROC_NULL) {
    pending.requests.emplace_back();
    MPI_Irecv(recv, mpi_count(count), mpi_type(type), source, 0, group, &pending.requests.back());
  }
  if (dest != MPI_PROC_NULL) {
    pending.requests.emplace_back();
    MPI_Isend(send, mpi_count(count), mpi_type(type), dest, 0, group, &pending.requests.back());
  }
}

void MpiComm::wait_impl(PendingExchange& pending) {
  wait_for_requests(pending.requests.data(), pending.request_entries.data(), static_cast<int>(pending.requests.size()));
  for (const HostStaging& s : pending.staged)
    if (s.device_recv != nullptr) copy_to_memory_space(s.device_recv, s.recv.get(), s.bytes);
}

void MpiComm::alltoall_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                            MPI_Comm group) {
  compat::fence("miniattn::MpiComm::alltoall");
  const int count = mpi_count(count_per_rank);
  const std::size_t bytes = static_cast<std::size_t>(size_of(group)) * count_per_rank * bytes_of(type);
  out_of_place(staged_, send, bytes, recv, bytes, [&](const void* from, void* to) {
    MPI_Request request;
    MPI_Ialltoall(from, count, mpi_type(type), to, count, mpi_type(type), group, &request);
    finish(request, current_entry());
  });
}

void MpiComm::allgather_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                             MPI_Comm group) {
  compat::fence("miniattn::MpiComm::allgather");
  const int count = mpi_count(count_per_rank);
  const std::size_t block_bytes = count_per_rank * bytes_of(type);
  const std::size_t all_bytes = static_cast<std::size_t>(size_of(group)) * block_bytes;
  out_of_place(staged_, send, block_bytes, recv, all_bytes, [&](const void* from, void* to) {
    MPI_Request request;
    MPI_Iallgather(from, count, mpi_type(type), to, count, mpi_type(type), group, &request);
    finish(request, current_entry());
  });
}

void MpiComm::reduce_scatter_sum_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                                      MPI_Comm group) {
  compat::fence("miniattn::MpiComm::reduce_scatter_sum");
  const int count = mpi_count(count_per_rank);
  const std::size_t block_bytes = count_per_rank * bytes_of(type);
  const std::size_t all_bytes = static_cast<std::size_t>(size_of(group)) * block_bytes;
  out_of_place(stage_sum(staged_, type), send, all_bytes, recv, block_bytes,
               [&](const void* from, void* to) {
                 MPI_Request request;
                 MPI_Ireduce_scatter_block(from, to, count, mpi_type(type), mpi_sum(type), group, &request);
                 finish(request, current_entry());
               });
}

}  // namespace miniattn
