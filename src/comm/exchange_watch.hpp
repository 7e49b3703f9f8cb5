#pragma once
// Every wait of an exchange has a deadline (run.exchange_timeout_s; 0: none),
// and every exchange is written into this rank's flight record
// (comm/flight_record.hpp), so that a rank that stops, hangs or takes another
// path never hangs the job: where a wait passes its deadline, the rank prints
// the exchange, step and layer it waits in and for whom, writes its record,
// tells the other ranks to write theirs, and ends the job (MPI_Abort, after
// NCCL's ncclCommAbort) with exit status kExitDeadline.
//
// The one place that waits is here: wait_for_requests (MPI's nonblocking
// calls, finished by MPI_Testall against a clock) and wait_until (work MPI
// does not hold, such as NCCL's stream). Blocking MPI calls go through
// comm/watched_mpi.hpp. Waits inside libraries (HDF5's collective I/O) are
// covered by a WatchedRegion, which a watchdog thread times.
//
// One watch per process: the record is the process's, as PyTorch's flight
// recorder's is. Before start_exchange_watch (unit tests), exchanges are
// recorded and wait without a deadline.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

#include "comm/flight_record.hpp"

namespace miniattn {

struct ExchangeWatchSettings {
  double deadline_seconds = 0;  // 0: no deadline
  std::string record_folder;    // rank<R>.json is written here
  // Test only (MINIATTN_FAULT "skip_exchange=LABEL#N"): this rank skips its
  // N-th post of LABEL (from 0), as a rank on another code path would.
  std::string skip_label;
  std::int64_t skip_index = -1;
};

// Starts the watch: collective over world (it duplicates world for the
// notice that tells the other ranks to write their records).
void start_exchange_watch(const ExchangeWatchSettings& settings, MPI_Comm world);
// Ends it before MPI_Finalize: the watchdog thread joins, the notice channel closes.
void end_exchange_watch();
struct ExchangeWatchScope {
  ExchangeWatchScope(const ExchangeWatchSettings& settings, MPI_Comm world) {
    start_exchange_watch(settings, world);
  }
  ~ExchangeWatchScope() { end_exchange_watch(); }
  ExchangeWatchScope(const ExchangeWatchScope&) = delete;
  ExchangeWatchScope& operator=(const ExchangeWatchScope&) = delete;
};

// Where the run is, for the record and the message (-1: none).
void set_exchange_step(std::int64_t step, std::int64_t micro_batch = -1);
void set_exchange_layer(std::int64_t layer);

// Records a post and returns its entry's seq. dest and source are ranks of
// comm (point-to-point ops; MPI_PROC_NULL: none).
std::uint64_t record_exchange(const char* label, ExchangeOp op, MPI_Comm comm, std::uint64_t bytes,
                              int dest = MPI_PROC_NULL, int source = MPI_PROC_NULL);
void complete_exchange(std::uint64_t seq);
// The injected fault: true (once) where this post is the one to skip.
bool skip_injected_exchange(const char* label);

// Waits for `count` requests, request i belonging to entry entries[i], and
// marks the entries completed.
void wait_for_requests(MPI_Request* requests, const std::uint64_t* entries, int count);
// Polls `done` until it returns true, waiting in entry `entry`.
void wait_until(const std::function<bool()>& done, std::uint64_t entry);
// Runs before the job is aborted (NcclComm: ncclCommAbort on its communicators).
void on_exchange_abort(std::function<void()> hook);

// A region whose waits happen inside a library (HDF5's collective I/O): past
// the deadline, the watchdog thread ends the job. Regions do not nest.
class WatchedRegion {
 public:
  explicit WatchedRegion(const char* label);
  ~WatchedRegion();
  WatchedRegion(const WatchedRegion&) = delete;
  WatchedRegion& operator=(const WatchedRegion&) = delete;
};

}  // namespace miniattn
