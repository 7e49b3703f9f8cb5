#pragma once
// Exchanges between ranks, behind one interface (docs/design.md section 3) with an
// MPI backend (MpiComm, host or GPU-aware MPI) and an NCCL backend (NcclComm,
// built with MINIATTN_ENABLE_NCCL). A group of ranks is named by its MPI
// communicator whatever the backend.
//
// Every exchange counts the payload bytes this rank sends to OTHER ranks (for
// an all-reduce: the buffer size) and the seconds this rank spends in it (for
// a non-blocking shift: posting plus waiting, i.e. the part not hidden behind
// compute), so the report prints them beside the analytic formula.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/deck_words.hpp"
#include "comm/exchange_label.hpp"
#include "comm/flight_record.hpp"
#include "core/types.hpp"

namespace miniattn {

struct ExchangeStats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t calls = 0;
  double seconds = 0.0;
};

// What travels: fp32, fp64, or bf16 (activations of bf16 runs; moved as 16-bit
// words, summed by widening to fp32 and rounding once).
enum class ScalarType { f32, f64, bf16 };

template <class T>
constexpr ScalarType scalar_type_of();
template <>
constexpr ScalarType scalar_type_of<float>() { return ScalarType::f32; }
template <>
constexpr ScalarType scalar_type_of<double>() { return ScalarType::f64; }
template <>
constexpr ScalarType scalar_type_of<bf16>() { return ScalarType::bf16; }
constexpr std::size_t bytes_of(ScalarType type) {
  return type == ScalarType::f32 ? sizeof(float) : type == ScalarType::f64 ? sizeof(double) : sizeof(bf16);
}

// A transfer staged through host memory (MPI that cannot take device
// memory): the host copies live until the wait, which copies `recv` to
// `device_recv`.
struct HostStaging {
  std::unique_ptr<char[]> send, recv;
  void* device_recv = nullptr;
  std::size_t bytes = 0;
};

// Non-blocking transfers in flight; finished by Comm::wait.
struct PendingExchange {
  std::vector<MPI_Request> requests;  // MPI backend
  std::vector<HostStaging> staged;    // MPI backend staging through host memory
  bool stream_work = false;           // NCCL backend: work queued on the device stream
  void* stream_comm = nullptr;        // NCCL backend: the communicator that queued it (an ncclComm_t)
  Exchange label = Exchange::loss;  // the label of the posts it holds
  // Flight-record entries (comm/exchange_watch.hpp): of each post, and of each request.
  std::vector<std::uint64_t> entries, request_entries;
  bool active() const { return !requests.empty() || stream_work; }
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual std::string backend() const = 0;

  // Sums data over all ranks of group, in place.
  template <class T>
  void allreduce_sum(const View1<T>& data, MPI_Comm group, Exchange label);

  // Sums one host value over group (small control reductions, always over MPI).
  double allreduce_sum(double value, MPI_Comm group, Exchange label);

  // Posts a non-blocking send of `count` elements at send to rank dest and a
  // receive of as many into recv from rank source (a ring shift). Several
  // posts may share one PendingExchange; the buffers are untouchable until wait().
  template <class T>
  void post_shift(const T* send, T* recv, std::size_t count, int dest, int source, MPI_Comm group,
                  Exchange label, PendingExchange& pending);
  void wait(PendingExchange& pending);

  // One direction of a shift (pipeline stages): a non-blocking send of
  // `count` elements to rank dest of group, or a receive from rank source;
  // the buffer is untouchable until wait(). A send counts its bytes, a receive none.
  template <class T>
  void post_send(const T* send, std::size_t count, int dest, MPI_Comm group, Exchange label,
                 PendingExchange& pending);
  template <class T>
  void post_recv(T* recv, std::size_t count, int source, MPI_Comm group, Exchange label,
                 PendingExchange& pending);

  // All-to-all: block j of send (count_per_rank elements) goes to rank j, block
  // i of recv comes from rank i. Bytes counted exclude the block kept locally.
  template <class T>
  void alltoall(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group, Exchange label);

  // All-gather (entering a sequence-parallel region): the count_per_rank
  // elements at send of rank i land in block i of recv (size x count_per_rank
  // elements); send and recv do not overlap.
  // Reduce-scatter (leaving one): recv (count_per_rank elements) is the sum
  // over the group's ranks of block `rank` of their send (size x count_per_rank
  // elements); send and recv do not overlap.
  // Both count, like all-to-all, the blocks sent to the other ranks:
  // (size - 1) x count_per_rank elements. On a group of one they are a copy
  // in the memory space (a call of 0 bytes, no exchange).
  template <class T>
  void allgather(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group, Exchange label);
  template <class T>
  void reduce_scatter_sum(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm group,
                          Exchange label);

  // True when exchanges copy device data through host buffers (MPI that is not GPU-aware).
  virtual bool stages_through_host() const { return false; }

  const std::map<Exchange, ExchangeStats>& stats() const { return stats_; }
  void reset_stats() { stats_.clear(); }

 protected:
  virtual void allreduce_sum_impl(void* data, std::size_t count, ScalarType type, MPI_Comm group) = 0;
  // dest or source MPI_PROC_NULL: that direction is left out (send or recv is then null).
  virtual void post_shift_impl(const void* send, void* recv, std::size_t count, ScalarType type, int dest,
                               int source, MPI_Comm group, PendingExchange& pending) = 0;
  virtual void wait_impl(PendingExchange& pending) = 0;
  virtual void alltoall_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                             MPI_Comm group) = 0;
  // Called on groups of two ranks or more only.
  virtual void allgather_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                              MPI_Comm group) = 0;
  virtual void reduce_scatter_sum_impl(const void* send, void* recv, std::size_t count_per_rank, ScalarType type,
                                       MPI_Comm group) = 0;
  // The flight-record entry of the collective an *_impl call runs.
  std::uint64_t current_entry() const { return current_entry_; }

 private:
  template <class Run>
  void collective(Exchange label, ExchangeOp op, MPI_Comm group, std::uint64_t bytes_sent, Run&& exchange);
  template <class Post>
  void point_to_point(Exchange label, MPI_Comm group, std::uint64_t bytes_sent, std::uint64_t bytes, int dest,
                      int source, PendingExchange& pending, Post&& post);

  std::map<Exchange, ExchangeStats> stats_;
  std::uint64_t current_entry_ = 0;
};

// The MPI backend: View data pointers go straight to MPI, or, when staging,
// through host buffers (device data an MPI library cannot read); each call
// fences the execution space first, because since Kokkos 4.0 device kernels
// run asynchronously.
class MpiComm final : public Comm {
 public:
  explicit MpiComm(bool stage_through_host = false) : staged_(stage_through_host) {}
  std::string backend() const override { return "mpi"; }
  bool stages_through_host() const override { return staged_; }

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
  bool staged_;
};

// Whether MPI exchanges of this build's memory must go through host buffers:
// never for host memory; for device memory unless gpu_aware_mpi is true or,
// with auto, the MPI library reports support for this device kind. Agreed
// over world (staging if any rank needs it). Collective.
bool mpi_needs_host_staging(GpuAwareMpi gpu_aware_mpi, MPI_Comm world);

// The backend named by parallel.comm ("mpi" or "nccl"). Collective over world.
std::unique_ptr<Comm> make_comm(CommBackend backend, MPI_Comm world,
                                GpuAwareMpi gpu_aware_mpi = GpuAwareMpi::automatic);

}  // namespace miniattn
