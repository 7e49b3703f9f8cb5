#pragma once
// Exchanges between ranks, behind one interface (DESIGN.md section 3). Every
// exchange counts the payload bytes this rank sends to OTHER ranks (for an
// all-reduce: the buffer size) and the seconds this rank spends in it (for a
// non-blocking shift: posting plus waiting, i.e. the part not hidden behind
// compute), so the report can print them beside the analytic formula.
//
// The MPI backend passes View data pointers straight to MPI (which must be
// GPU-aware on device builds); each call fences the execution space first,
// because since Kokkos 4.0 device kernels run asynchronously.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace miniattn {

struct ExchangeStats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t calls = 0;
  double seconds = 0.0;
};

// Non-blocking transfers in flight; finished by Comm::wait.
class PendingExchange {
 public:
  bool active() const { return !requests_.empty(); }

 private:
  friend class Comm;
  std::vector<MPI_Request> requests_;
  std::string label_;
};

class Comm {
 public:
  // Sums data over all ranks of comm, in place.
  template <class T>
  void allreduce_sum(const View1<T>& data, MPI_Comm comm, const std::string& label);

  // Sums one host value over comm (small control reductions, counted too).
  double allreduce_sum(double value, MPI_Comm comm, const std::string& label);

  // Posts a non-blocking send of `count` elements at send to rank dest and a
  // receive of as many into recv from rank source (ring shift). Several posts
  // may share one PendingExchange; nothing may touch the buffers until wait().
  template <class T>
  void post_shift(const T* send, T* recv, std::size_t count, int dest, int source, MPI_Comm comm,
                  const std::string& label, PendingExchange& pending);
  void wait(PendingExchange& pending);

  // All-to-all: block j of send (count_per_rank elements) goes to rank j; block
  // i of recv comes from rank i. Bytes counted exclude the block kept locally.
  template <class T>
  void alltoall(const T* send, T* recv, std::size_t count_per_rank, MPI_Comm comm, const std::string& label);

  const std::map<std::string, ExchangeStats>& stats() const { return stats_; }
  void reset_stats() { stats_.clear(); }

 private:
  std::map<std::string, ExchangeStats> stats_;
};

}  // namespace miniattn
