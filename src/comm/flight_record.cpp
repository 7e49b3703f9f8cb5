#include "comm/flight_record.hpp"

#include <unistd.h>

#include <algorithm>

namespace miniattn {

const char* to_string(ExchangeOp op) {
  switch (op) {
    case ExchangeOp::shift: return "shift";
    case ExchangeOp::send: return "send";
    case ExchangeOp::recv: return "recv";
    case ExchangeOp::allreduce: return "allreduce";
    case ExchangeOp::alltoall: return "alltoall";
    case ExchangeOp::allgather: return "allgather";
    case ExchangeOp::reduce_scatter: return "reduce_scatter";
    case ExchangeOp::bcast: return "bcast";
    case ExchangeOp::barrier: return "barrier";
  }
  return "?";
}

FlightRecord::FlightRecord(MPI_Comm world) : start_(std::chrono::steady_clock::now()) {
  MPI_Comm_rank(world, &world_rank_);
  MPI_Comm_size(world, &world_size_);
  MPI_Comm_group(world, &world_group_);
}

double FlightRecord::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

const FlightRecord::Communicator& FlightRecord::communicator(MPI_Comm comm) {
  const auto found = communicators_.find(comm);
  if (found != communicators_.end()) return found->second;
  // Once per communicator: its ranks in world numbering.
  MPI_Group group;
  MPI_Comm_group(comm, &group);
  int size = 0;
  MPI_Group_size(group, &size);
  std::vector<int> local(static_cast<std::size_t>(size)), world(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(group, size, local.data(), world_group_, world.data());
  MPI_Group_free(&group);
  // Counted per set of ranks, not per communicator: the analyzer knows a
  // group by its members (world and a grid axis spanning it are one group),
  // and by its channel where a named duplicate has one.
  std::vector<int> members = world;
  std::sort(members.begin(), members.end());
  char name[MPI_MAX_OBJECT_NAME] = "";
  int length = 0;
  MPI_Comm_get_name(comm, name, &length);
  const std::string channel = std::string(name).rfind(kChannelPrefix, 0) == 0 ? name : "";
  int index = -1;
  for (std::size_t g = 0; g < groups_.size() && index < 0; ++g)
    if (groups_[g].members == members && groups_[g].channel == channel) index = static_cast<int>(g);
  if (index < 0) {
    groups_.push_back(Group{world, members, channel, 0, {}, {}});
    index = static_cast<int>(groups_.size()) - 1;
  }
  return communicators_.emplace(comm, Communicator{index, world}).first->second;
}

FlightEntry& FlightRecord::open(const char* label, ExchangeOp op, MPI_Comm comm, std::uint64_t bytes,
                                const ExchangePosition& where, int dest, int source) {
  FlightEntry& e = entries_[next_seq_ % kEntries];
  e = FlightEntry{};
  e.seq = next_seq_++;
  e.label = label;
  e.op = op;
  const Communicator& c = communicator(comm);
  e.group = c.group;
  e.bytes = bytes;
  e.where = where;
  e.posted_s = now();
  Group& g = groups_[static_cast<std::size_t>(e.group)];
  const bool point_to_point = op == ExchangeOp::shift || op == ExchangeOp::send || op == ExchangeOp::recv;
  if (!point_to_point) e.group_seq = g.collectives++;
  if (point_to_point && dest != MPI_PROC_NULL) {
    e.send_to = c.world_ranks[static_cast<std::size_t>(dest)];
    e.send_seq = g.sends[e.send_to]++;
  }
  if (point_to_point && source != MPI_PROC_NULL) {
    e.recv_from = c.world_ranks[static_cast<std::size_t>(source)];
    e.recv_seq = g.receives[e.recv_from]++;
  }
  return e;
}

const FlightEntry* FlightRecord::find(std::uint64_t seq) const {
  if (seq >= next_seq_ || next_seq_ - seq > kEntries) return nullptr;
  return &entries_[seq % kEntries];
}

void FlightRecord::complete(std::uint64_t seq) {
  if (const FlightEntry* e = find(seq)) {
    FlightEntry& entry = entries_[e->seq % kEntries];
    if (entry.completed_s < 0) entry.completed_s = now();
  }
}

nlohmann::json FlightRecord::entry_json(const FlightEntry& e) const {
  const auto or_null = [](std::int64_t value) { return value < 0 ? nlohmann::json() : nlohmann::json(value); };
  return {{"seq", e.seq},
          {"label", e.label},
          {"op", to_string(e.op)},
          {"group", group_ranks(e.group)},
          {"channel", groups_[static_cast<std::size_t>(e.group)].channel},
          {"group_seq", or_null(e.group_seq)},
          {"send_to", or_null(e.send_to)},
          {"send_seq", or_null(e.send_seq)},
          {"recv_from", or_null(e.recv_from)},
          {"recv_seq", or_null(e.recv_seq)},
          {"bytes", e.bytes},
          {"step", e.where.step},
          {"micro_batch", e.where.micro_batch},
          {"layer", e.where.layer},
          {"posted_s", e.posted_s},
          {"completed_s", e.completed_s < 0 ? nlohmann::json() : nlohmann::json(e.completed_s)}};
}

nlohmann::json FlightRecord::to_json(std::int64_t waiting, double deadline_seconds) const {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  nlohmann::json entries = nlohmann::json::array();
  nlohmann::json waiting_index;
  const std::uint64_t first = next_seq_ > kEntries ? next_seq_ - kEntries : 0;
  for (std::uint64_t seq = first; seq < next_seq_; ++seq) {
    if (static_cast<std::int64_t>(seq) == waiting) waiting_index = entries.size();
    entries.push_back(entry_json(entries_[seq % kEntries]));
  }
  return {{"format", "miniattn flight record 1"},
          {"rank", world_rank_},
          {"world_size", world_size_},
          {"host", host},
          {"pid", static_cast<long>(getpid())},
          {"deadline_seconds", deadline_seconds},
          {"written_at_s", now()},
          {"waiting", waiting_index},
          {"entries", entries}};
}

}  // namespace miniattn
