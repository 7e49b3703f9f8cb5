// The NCCL backend of Comm; see nccl_comm.hpp for the contract.
// Compiled by the host C++ compiler against the CUDA runtime and NCCL headers
// (no device code here), into miniattn_lib when MINIATTN_ENABLE_NCCL is on and
// into the miniattn_nccl_check library otherwise (compile and link check).
#include "comm/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <map>
#include <string>

#include "comm/exchange_watch.hpp"
#include "comm/watched_mpi.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn {

namespace {

// The stream Kokkos launches its kernels on. The only place that knows which
// backend Kokkos was built with; on a non-CUDA build (a compile check only:
// NCCL cannot use host buffers) it is the legacy default stream.
cudaStream_t kokkos_stream() {
#if defined(KOKKOS_ENABLE_CUDA)
  return Kokkos::Cuda().cuda_stream();
#else
  return 0;
#endif
}

void check_cuda(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return;
  throw RuntimeFailure(std::string("NcclComm: ") + call + " failed: " + cudaGetErrorName(result) + ": " +
                       cudaGetErrorString(result));
}

void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm = nullptr) {
  // Nonblocking communicators return ncclInProgress; settle() waits for them.
  if (result == ncclSuccess || result == ncclInProgress) return;
  std::string message = std::string("NcclComm: ") + call + " failed: " + ncclGetErrorString(result);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += std::string(" (") + detail + ")";
#else
  (void)comm;
#endif
  throw RuntimeFailure(message);
}

ncclDataType_t nccl_type(ScalarType type) {
  return type == ScalarType::f32 ? ncclFloat32 : type == ScalarType::f64 ? ncclFloat64 : ncclBfloat16;
}

// Waits, through the exchange watch (its deadline), until the nonblocking
// communicator has finished the call in progress (creation, an enqueue, a
// group's end); an error it reports ends the exchange.
void settle(ncclComm_t comm, const char* call, std::uint64_t entry) {
  wait_until([&] {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
    if (state == ncclInProgress) return false;
    check_nccl(state, call, comm);
    return true;
  }, entry);
}

// Waits, through the exchange watch, until `stream` has run what was queued
// on it, watching the communicator for an asynchronous error (a peer gone, a
// network failure) that would otherwise leave the stream waiting for ever.
void wait_for_stream(cudaStream_t stream, ncclComm_t comm, const char* name, std::uint64_t entry) {
  wait_until([&] {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
    if (state != ncclInProgress) check_nccl(state, name, comm);
    const cudaError_t query = cudaStreamQuery(stream);
    if (query == cudaErrorNotReady) return false;
    check_cuda(query, (std::string("cudaStreamQuery (after ") + name + ")").c_str());
    return true;
  }, entry);
}

// A blocking collective: fence Kokkos (the data comes from its kernels),
// `enqueue(stream)` on the Kokkos stream and wait for it, so the result is
// there on return.
template <class Enqueue>
void blocking(ncclComm_t comm, const char* name, std::uint64_t entry, Enqueue&& enqueue) {
  compat::fence(std::string("miniattn::NcclComm::") + name);
  const cudaStream_t stream = kokkos_stream();
  enqueue(stream);
  settle(comm, name, entry);
  wait_for_stream(stream, comm, name, entry);
}

// Runs `enqueue` (ncclSend/ncclRecv calls) inside one NCCL group. The group is
// closed even when a call inside it fails, so NCCL does not stay in group mode.
template <class Enqueue>
void grouped(ncclComm_t comm, const char* what, std::uint64_t entry, Enqueue&& enqueue) {
  check_nccl(ncclGroupStart(), "ncclGroupStart", comm);
  ncclResult_t inside = ncclSuccess;
  const char* failed_call = "";
  enqueue(inside, failed_call);
  const ncclResult_t end = ncclGroupEnd();
  check_nccl(inside, failed_call, comm);
  check_nccl(end, what, comm);
  settle(comm, what, entry);
}

// Records the first failing call of a group.
void note(ncclResult_t result, const char* call, ncclResult_t& first, const char*& first_call) {
  if (result != ncclSuccess && result != ncclInProgress && first == ncclSuccess) {
    first = result;
    first_call = call;
  }
}

// All-to-all as one group of point-to-point calls: block j of send to rank j,
// block i of recv from rank i (the only way before NCCL 2.28).
[[maybe_unused]] void alltoall_by_send_recv(const void* send, void* recv, std::size_t count, ScalarType type,
                                            int nranks, ncclComm_t comm, cudaStream_t stream, std::uint64_t entry) {
  const std::size_t block_bytes = count * bytes_of(type);
  grouped(comm, "ncclGroupEnd (all-to-all)", entry, [&](ncclResult_t& first, const char*& first_call) {
    for (int peer = 0; peer < nranks; ++peer) {
      const auto offset = static_cast<std::size_t>(peer) * block_bytes;
      note(ncclSend(static_cast<const char*>(send) + offset, count, nccl_type(type), peer, comm, stream), "ncclSend",
           first, first_call);
      note(ncclRecv(static_cast<char*>(recv) + offset, count, nccl_type(type), peer, comm, stream), "ncclRecv", first,
           first_call);
    }
  });
}

}  // namespace

struct NcclComm::Impl {
  struct Group {
    ncclComm_t comm = nullptr;
    int rank = 0;
    int size = 1;
  };
  std::map<MPI_Comm, Group> groups;  // by MPI communicator handle
  int device = -1;                   // the device current when the first group was built
  cudaStream_t shift_stream = nullptr;

  const Group& group(MPI_Comm mpi_group);
  cudaStream_t ring_stream();
  // An exchange's deadline passed: every communicator ends now (the watch then aborts the job).
  void abort_all() {
    for (auto& entry : groups) ncclCommAbort(entry.second.comm);
    groups.clear();
  }
};

const NcclComm::Impl::Group& NcclComm::Impl::group(MPI_Comm mpi_group) {
  if (mpi_group == MPI_COMM_NULL) throw RuntimeFailure("NcclComm: exchange over MPI_COMM_NULL");
  const auto found = groups.find(mpi_group);
  if (found != groups.end()) return found->second;

  Group g;
  MPI_Comm_rank(mpi_group, &g.rank);
  MPI_Comm_size(mpi_group, &g.size);
  if (device < 0) check_cuda(cudaGetDevice(&device), "cudaGetDevice");

  // Rank 0 sends the id together with whether it could make one, so that a
  // failure there ends every rank of the group instead of leaving them waiting.
  struct {
    int ok;
    ncclUniqueId id;
  } root{};
  std::string root_error;
  if (g.rank == 0) {
    try {
      check_nccl(ncclGetUniqueId(&root.id), "ncclGetUniqueId");
      root.ok = 1;
    } catch (const RuntimeFailure& e) {
      root_error = e.what();
    }
  }
  watched_bcast(&root, static_cast<int>(sizeof(root)), MPI_BYTE, 0, mpi_group, "nccl.unique_id");
  if (root.ok != 1) {
    throw RuntimeFailure(g.rank == 0 ? root_error
                                     : std::string("NcclComm: rank 0 of the group could not create an NCCL id"));
  }
  const std::string init_call = "ncclCommInitRank (rank " + std::to_string(g.rank) + " of " +
                                std::to_string(g.size) + ", CUDA device " + std::to_string(device) + ")";
  // Nonblocking, so that every wait on it can end by the exchange deadline
  // and the communicator can be aborted (ncclCommAbort) when one passes.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::uint64_t entry = record_exchange("nccl.init", ExchangeOp::barrier, mpi_group, 0);
  check_nccl(ncclCommInitRankConfig(&g.comm, g.size, root.id, g.rank, &config), init_call.c_str());
  settle(g.comm, init_call.c_str(), entry);
  if (groups.empty()) on_exchange_abort([this] { abort_all(); });
  return groups.emplace(mpi_group, g).first->second;
}

cudaStream_t NcclComm::Impl::ring_stream() {
  if (shift_stream == nullptr)
    check_cuda(cudaStreamCreateWithFlags(&shift_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return shift_stream;
}

NcclComm::NcclComm() : impl_(std::make_unique<Impl>()) {}

NcclComm::~NcclComm() {
  // No exceptions from a destructor: report and go on.
  if (impl_->shift_stream != nullptr) {
    const cudaError_t sync = cudaStreamSynchronize(impl_->shift_stream);
    if (sync != cudaSuccess)
      std::fprintf(stderr, "NcclComm: cudaStreamSynchronize failed at destruction: %s\n", cudaGetErrorString(sync));
  }
  for (auto& entry : impl_->groups) {
    const ncclResult_t result = ncclCommDestroy(entry.second.comm);
    if (result != ncclSuccess)
      std::fprintf(stderr, "NcclComm: ncclCommDestroy failed: %s\n", ncclGetErrorString(result));
  }
  if (impl_->shift_stream != nullptr) {
    const cudaError_t destroyed = cudaStreamDestroy(impl_->shift_stream);
    if (destroyed != cudaSuccess)
      std::fprintf(stderr, "NcclComm: cudaStreamDestroy failed: %s\n", cudaGetErrorString(destroyed));
  }
}

void NcclComm::attach(MPI_Comm group) { impl_->group(group); }

void NcclComm::allreduce_sum_impl(void* data, std::size_t count, ScalarType type, MPI_Comm group) {
  const Impl::Group& g = impl_->group(group);
  blocking(g.comm, "allreduce_sum", current_entry(), [&](cudaStream_t stream) {
    check_nccl(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, g.comm, stream), "ncclAllReduce", g.comm);
  });
}

void NcclComm::post_shift_impl(const void* send, void* recv, std::size_t count, ScalarType type, int dest,
                               int source, MPI_Comm group, PendingExchange& pending) {
  const Impl::Group& g = impl_->group(group);
  const auto outside = [&](int rank) { return rank != MPI_PROC_NULL && (rank < 0 || rank >= g.size); };
  if (outside(dest) || outside(source))
    throw RuntimeFailure("NcclComm: shift to rank " + std::to_string(dest) + " from rank " + std::to_string(source) +
                         " in a group of " + std::to_string(g.size));
  if (count == 0) return;
  compat::fence("miniattn::NcclComm::post_shift");
  const cudaStream_t stream = impl_->ring_stream();
  const std::uint64_t entry = pending.entries.empty() ? 0 : pending.entries.back();
  grouped(g.comm, "ncclGroupEnd (shift)", entry, [&](ncclResult_t& first, const char*& first_call) {
    if (dest != MPI_PROC_NULL) note(ncclSend(send, count, nccl_type(type), dest, g.comm, stream), "ncclSend", first, first_call);
    if (source != MPI_PROC_NULL) note(ncclRecv(recv, count, nccl_type(type), source, g.comm, stream), "ncclRecv", first, first_call);
  });
  pending.stream_work = true;
  pending.stream_comm = g.comm;
}

void NcclComm::wait_impl(PendingExchange& pending) {
  if (!pending.stream_work || impl_->shift_stream == nullptr) return;
  wait_for_stream(impl_->shift_stream, static_cast<ncclComm_t>(pending.stream_comm), "ring shift",
                  pending.entries.empty() ? 0 : pending.entries.front());
}

void NcclComm::alltoall_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                             MPI_Comm group) {
  const Impl::Group& g = impl_->group(group);
  if (count_per_rank == 0) return;
  blocking(g.comm, "alltoall", current_entry(), [&](cudaStream_t stream) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    check_nccl(ncclAlltoAll(send, recv, count_per_rank, nccl_type(type), g.comm, stream), "ncclAlltoAll", g.comm);
#else
    alltoall_by_send_recv(send, recv, count_per_rank, type, g.size, g.comm, stream, current_entry());
#endif
  });
}

void NcclComm::allgather_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                              MPI_Comm group) {
  const Impl::Group& g = impl_->group(group);
  if (count_per_rank == 0) return;
  blocking(g.comm, "allgather", current_entry(), [&](cudaStream_t stream) {
    check_nccl(ncclAllGather(send, recv, count_per_rank, nccl_type(type), g.comm, stream), "ncclAllGather", g.comm);
  });
}

void NcclComm::reduce_scatter_sum_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                                       MPI_Comm group) {
  const Impl::Group& g = impl_->group(group);
  if (count_per_rank == 0) return;
  blocking(g.comm, "reduce_scatter_sum", current_entry(), [&](cudaStream_t stream) {
    check_nccl(ncclReduceScatter(send, recv, count_per_rank, nccl_type(type), ncclSum, g.comm, stream),
               "ncclReduceScatter", g.comm);
  });
}

int nccl_header_version() { return NCCL_VERSION_CODE; }

int nccl_library_version() {
  int version = 0;
  check_nccl(ncclGetVersion(&version), "ncclGetVersion");
  return version;
}

}  // namespace miniattn
