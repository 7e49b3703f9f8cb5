#pragma once
// The NCCL backend of Comm (docs/design.md section 3).
//
// A group of ranks is still named by its MPI communicator. The first time a
// group is used, NcclComm builds an NCCL communicator for it: rank 0 of the
// group calls ncclGetUniqueId, a broadcast sends the id over the group and every
// rank calls ncclCommInitRankConfig with its rank in the group, on the device that
// is current (chosen by Kokkos, e.g. --kokkos-map-device-id-by=mpi_rank; this
// class never changes it). Creation is collective over the group, so every
// rank of a group must make its first exchange on that group at the same point
// of the program (true when all ranks run the same code path); `attach` does it
// eagerly. NCCL communicators are cached by MPI_Comm handle and destroyed with
// the NcclComm (destruction uses no MPI, so it may come after MPI_Comm_free);
// an NcclComm must not be used with a group whose handle was freed and reused
// by MPI for another group, and should be destroyed before Kokkos::finalize.
//
// Buffers must be device memory (a Kokkos CUDA build). Every call fences the
// Kokkos execution space first, because the data comes from Kokkos kernels.
//   allreduce / alltoall / allgather / reduce-scatter: run on the Kokkos
//     execution space's CUDA stream and wait for it, so the result is there
//     on return.
//   ring shifts: run on a separate non-blocking stream owned by NcclComm, so
//     the transfer overlaps the compute that Kokkos launches between post and
//     wait (on the Kokkos stream it would queue behind it); wait waits for
//     that stream.
// The communicators are nonblocking (config.blocking = 0): every wait polls
// the stream and ncclCommGetAsyncError through the exchange watch
// (comm/exchange_watch.hpp), so it ends by the exchange deadline, and the
// watch calls ncclCommAbort on every communicator before it ends the job.
//
// This header needs neither CUDA nor NCCL headers (the state lives in Impl),
// so including it does not leak CUDA include directories into other files.
#include <memory>
#include <string>

#include "comm/comm.hpp"

namespace miniattn {

class NcclComm final : public Comm {
 public:
  NcclComm();
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  std::string backend() const override { return "nccl"; }

  // Builds the NCCL communicator of group now (collective over group).
  void attach(MPI_Comm group);

 protected:
  void allreduce_sum_impl(void* data, std::size_t count, ScalarType type, MPI_Comm group) override;
  void post_shift_impl(const void* send, void* recv, std::size_t count, ScalarType type, int dest, int source,
                       MPI_Comm group, PendingExchange& pending) override;
  void wait_impl(PendingExchange& pending) override;
  void alltoall_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                     MPI_Comm group) override;
  void allgather_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                      MPI_Comm group) override;
  void reduce_scatter_sum_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                               MPI_Comm group) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// NCCL_VERSION_CODE of the nccl.h this file was compiled against, and the
// version the NCCL library loaded at run time reports (ncclGetVersion; needs no
// GPU). Used by the link check.
int nccl_header_version();
int nccl_library_version();

}  // namespace miniattn
