#pragma once
// Each rank's last exchanges, kept in a ring buffer as PyTorch's flight
// recorder keeps its collectives, and written as JSON when an exchange's
// deadline passes (comm/exchange_watch.hpp); scripts/flight_record.py reads
// every rank's file and names the rank that did not join. The format is in
// docs/deck.md ("Exchange deadlines and the flight record").
//
// An entry carries what lets another rank's record be matched against it:
// collectives count per group (every member's n-th collective on a
// communicator is the same one), point-to-point posts per peer and direction
// (rank A's k-th send to B is B's k-th receive from A).
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace miniattn {

enum class ExchangeOp { shift, send, recv, allreduce, alltoall, allgather, reduce_scatter, bcast, barrier };
const char* to_string(ExchangeOp op);

// Where the run is: -1 where none applies (setup, the optimizer, the report).
struct ExchangePosition {
  std::int64_t step = -1;
  std::int64_t micro_batch = -1;
  std::int64_t layer = -1;
};

struct FlightEntry {
  std::uint64_t seq = 0;            // this rank's count of exchanges
  const char* label = "";           // a static string: the Exchange's name or a fixed word
  ExchangeOp op = ExchangeOp::allreduce;
  int group = -1;                   // index into FlightRecord::groups()
  std::int64_t group_seq = -1;      // collectives: this rank's count on the group
  int send_to = -1, recv_from = -1; // point-to-point: world ranks
  std::int64_t send_seq = -1, recv_seq = -1;
  std::uint64_t bytes = 0;
  ExchangePosition where;
  double posted_s = 0, completed_s = -1;  // seconds since the record began; -1: not completed
};

class FlightRecord {
 public:
  static constexpr std::size_t kEntries = 64;

  explicit FlightRecord(MPI_Comm world = MPI_COMM_WORLD);
  // Opens an entry for a post; `dest` and `source` are ranks of `comm`
  // (MPI_PROC_NULL: that direction is left out), used for point-to-point ops.
  FlightEntry& open(const char* label, ExchangeOp op, MPI_Comm comm, std::uint64_t bytes,
                    const ExchangePosition& where, int dest = MPI_PROC_NULL, int source = MPI_PROC_NULL);
  void complete(std::uint64_t seq);
  // The entry of `seq` while it is still in the buffer, else nullptr.
  const FlightEntry* find(std::uint64_t seq) const;
  // Seconds since the record began (a steady clock: the watchdog thread reads it without MPI).
  double now() const;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  const std::vector<int>& group_ranks(int group) const { return groups_[static_cast<std::size_t>(group)].ranks; }

  // The record as JSON, oldest entry first; `waiting` is the seq of the entry
  // this rank waits in, or -1.
  nlohmann::json to_json(std::int64_t waiting, double deadline_seconds) const;

 private:
  struct Group {
    std::vector<int> ranks;    // world ranks, in the (first) communicator's order
    std::vector<int> members;  // the same, sorted
    std::string channel;       // kChannelPrefix's name of a communicator that duplicates others' ranks, else ""
    std::int64_t collectives = 0;
    std::map<int, std::int64_t> sends, receives;  // by world rank
  };
  // A communicator: its group (by members) and its own order of world ranks.
  struct Communicator {
    int group = -1;
    std::vector<int> world_ranks;
  };
  const Communicator& communicator(MPI_Comm comm);
  // A communicator named with this prefix (MPI_Comm_set_name) counts its
  // messages on its own channel: MPI and NCCL match them per communicator,
  // and its order of them may differ from another's with the same ranks.
  static constexpr const char* kChannelPrefix = "miniattn.";
  nlohmann::json entry_json(const FlightEntry& e) const;

  std::chrono::steady_clock::time_point start_;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Group world_group_ = MPI_GROUP_NULL;
  std::uint64_t next_seq_ = 0;
  std::array<FlightEntry, kEntries> entries_{};
  std::map<MPI_Comm, Communicator> communicators_;
  std::vector<Group> groups_;
};

}  // namespace miniattn
