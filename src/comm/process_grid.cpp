#include "comm/process_grid.hpp"

#include <algorithm>
#include <numeric>

#include "comm/mpi_ranks.hpp"
#include "core/config.hpp"

namespace miniattn {

ProcessGrid ProcessGrid::create(MPI_Comm world, int dp, int pp, int tp, int ulysses_degree) {
  ProcessGrid g;
  g.world = world;
  g.world_rank = rank_in(world);
  g.world_size = size_of(world);
  g.dp_size = dp;
  g.pp_size = pp;
  g.tp_size = tp;
  g.sp_size = g.world_size / (dp * pp * tp);
  const int sp = g.sp_size;
  // world rank = ((dp index x pp + pp index) x sp + sp index) x tp + tp index
  const int tp_index = g.world_rank % tp;
  const int sp_index = g.world_rank / tp % sp;
  const int pp_index = g.world_rank / (tp * sp) % pp;
  const int dp_index = g.world_rank / (tp * sp * pp);
  MPI_Comm_split(world, (dp_index * pp + pp_index) * tp + tp_index, sp_index, &g.sp_comm);
  MPI_Comm_split(world, (pp_index * sp + sp_index) * tp + tp_index, dp_index, &g.dp_comm);
  MPI_Comm_split(world, (dp_index * pp + pp_index) * sp + sp_index, tp_index, &g.tp_comm);
  MPI_Comm_split(world, pp_index * sp + sp_index, dp_index * tp + tp_index, &g.position_comm);
  MPI_Comm_split(world, pp_index * tp + tp_index, dp_index * sp + sp_index, &g.shard_comm);
  MPI_Comm_split(world, pp_index, (dp_index * sp + sp_index) * tp + tp_index, &g.stage_comm);
  MPI_Comm_split(world, (dp_index * sp + sp_index) * tp + tp_index, pp_index, &g.pp_comm);
  MPI_Comm_dup(g.pp_comm, &g.pp_gradient_comm);
  MPI_Comm_set_name(g.pp_gradient_comm, "miniattn.pipeline_gradients");  // its own channel in the flight record
  const bool holds_wte = pp > 1 && (pp_index == 0 || pp_index == pp - 1);
  MPI_Comm_split(world, holds_wte ? (dp_index * sp + sp_index) * tp + tp_index : MPI_UNDEFINED, pp_index,
                 &g.tied_embedding_comm);
  g.sp_rank = rank_in(g.sp_comm);
  g.dp_rank = rank_in(g.dp_comm);
  g.tp_rank = rank_in(g.tp_comm);
  g.pp_rank = rank_in(g.pp_comm);
  g.ulysses_size = ulysses_degree;
  g.ring_size = g.sp_size / ulysses_degree;
  MPI_Comm_split(g.sp_comm, g.sp_rank / ulysses_degree, g.sp_rank % ulysses_degree, &g.ulysses_comm);
  MPI_Comm_split(g.sp_comm, g.sp_rank % ulysses_degree, g.sp_rank / ulysses_degree, &g.ring_comm);
  g.ulysses_rank = rank_in(g.ulysses_comm);
  g.ring_rank = rank_in(g.ring_comm);
  return g;
}

void ProcessGrid::free() {
  for (MPI_Comm* c : {&sp_comm, &dp_comm, &tp_comm, &position_comm, &shard_comm, &stage_comm, &pp_comm,
                      &pp_gradient_comm, &tied_embedding_comm, &ulysses_comm, &ring_comm})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

std::vector<index_t> owned_positions(index_t seq_len, int sp_size, int sp_rank, Layout layout) {
  std::vector<index_t> positions;
  if (layout == Layout::zigzag) {
    const index_t chunk = seq_len / (2 * sp_size);
    for (index_t c : {static_cast<index_t>(sp_rank), static_cast<index_t>(2 * sp_size - 1 - sp_rank)})
      for (index_t i = 0; i < chunk; ++i) positions.push_back(c * chunk + i);
  } else if (layout == Layout::striped) {
    for (index_t p = sp_rank; p < seq_len; p += sp_size) positions.push_back(p);
  } else {
    const index_t n = seq_len / sp_size;
    for (index_t i = 0; i < n; ++i) positions.push_back(sp_rank * n + i);
  }
  return positions;
}

namespace {

// The group's positions one rank's after another (the order the all-to-all receives them in).
std::vector<index_t> positions_by_rank(index_t seq_len, int sp_size, int ulysses, int group, Layout layout) {
  std::vector<index_t> positions;
  for (int u = 0; u < ulysses; ++u) {
    const std::vector<index_t> owned = owned_positions(seq_len, sp_size, group * ulysses + u, layout);
    positions.insert(positions.end(), owned.begin(), owned.end());
  }
  return positions;
}

// gathered[j] = by_rank[order[j]]: the group's rows as the all-to-all lays
// them down, in position order but under hybrid with striped positions.
std::vector<std::size_t> gathered_order(const std::vector<index_t>& by_rank, int sp_size, int ulysses, Layout layout) {
  std::vector<std::size_t> order(by_rank.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const bool rank_order = layout == Layout::striped && ulysses > 1 && ulysses < sp_size;
  if (!rank_order)
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return by_rank[a] < by_rank[b]; });
  return order;
}

}  // namespace

std::vector<index_t> group_positions(index_t seq_len, int sp_size, int ulysses, int group, Layout layout) {
  const std::vector<index_t> by_rank = positions_by_rank(seq_len, sp_size, ulysses, group, layout);
  std::vector<index_t> positions;
  for (const std::size_t r : gathered_order(by_rank, sp_size, ulysses, layout))
    positions.push_back(by_rank[r]);
  return positions;
}

std::vector<index_t> gathered_rows(index_t seq_len, int sp_size, int ulysses, int group, Layout layout) {
  const std::vector<index_t> by_rank = positions_by_rank(seq_len, sp_size, ulysses, group, layout);
  const std::vector<std::size_t> order = gathered_order(by_rank, sp_size, ulysses, layout);
  std::vector<index_t> rows(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) rows[order[j]] = static_cast<index_t>(j);
  return rows;
}

Decomposition decomposition_of(const Config& c, const ProcessGrid& grid) {
  Decomposition d;
  d.strategy = c.parallel.strategy;
  d.layout = c.parallel.layout;
  d.dp = grid.dp_size;
  d.pp = grid.pp_size;
  d.tp = grid.tp_size;
  d.sp = grid.sp_size;
  d.ulysses = grid.ulysses_size;
  d.micro_batches = c.train.micro_batches;
  d.virtual_stages = static_cast<int>(c.parallel.virtual_stages);
  d.tp_sequence_parallel = c.parallel.tp_sequence_parallel;
  return d;
}

}  // namespace miniattn
