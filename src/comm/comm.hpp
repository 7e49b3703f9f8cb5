#pragma once
// Exchanges between ranks. Every exchange counts the payload bytes this rank
// hands to the library (for an all-reduce: the buffer size) and
// the seconds it spends, so the report can print them beside the analytic
// formula. The MPI backend passes View data pointers straight to MPI (which
// must be GPU-aware on device builds); callers' data is fenced first.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/types.hpp"

namespace miniattn {

struct ExchangeStats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t calls = 0;
  double seconds = 0.0;
};

class Comm {
 public:
  // Sums data over all ranks of comm, in place; counted under `label`.
  template <class T>
  void allreduce_sum(const View1<T>& data, MPI_Comm comm, const std::string& label);

  // Sums one double over comm (host value; small control reductions, counted too).
  double allreduce_sum(double value, MPI_Comm comm, const std::string& label);

  const std::map<std::string, ExchangeStats>& stats() const { return stats_; }
  void reset_stats() { stats_.clear(); }

 private:
  std::map<std::string, ExchangeStats> stats_;
};

}  // namespace miniattn
