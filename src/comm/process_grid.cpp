#include "comm/process_grid.hpp"

namespace miniattn {

ProcessGrid ProcessGrid::create(MPI_Comm world, int dp, int ulysses_degree) {
  ProcessGrid g;
  g.world = world;
  MPI_Comm_rank(world, &g.world_rank);
  MPI_Comm_size(world, &g.world_size);
  g.dp_size = dp;
  g.sp_size = g.world_size / dp;
  // Consecutive world ranks form an SP group: sequence exchanges stay within a node.
  const int sp_group = g.world_rank / g.sp_size;
  const int sp_index = g.world_rank % g.sp_size;
  MPI_Comm_split(world, sp_group, sp_index, &g.sp_comm);
  MPI_Comm_split(world, sp_index, sp_group, &g.dp_comm);
  MPI_Comm_rank(g.sp_comm, &g.sp_rank);
  MPI_Comm_rank(g.dp_comm, &g.dp_rank);
  g.ulysses_size = ulysses_degree;
  g.ring_size = g.sp_size / ulysses_degree;
  MPI_Comm_split(g.sp_comm, g.sp_rank / ulysses_degree, g.sp_rank % ulysses_degree, &g.ulysses_comm);
  MPI_Comm_split(g.sp_comm, g.sp_rank % ulysses_degree, g.sp_rank / ulysses_degree, &g.ring_comm);
  MPI_Comm_rank(g.ulysses_comm, &g.ulysses_rank);
  MPI_Comm_rank(g.ring_comm, &g.ring_rank);
  return g;
}

void ProcessGrid::free() {
  if (sp_comm != MPI_COMM_NULL) MPI_Comm_free(&sp_comm);
  if (dp_comm != MPI_COMM_NULL) MPI_Comm_free(&dp_comm);
  if (ulysses_comm != MPI_COMM_NULL) MPI_Comm_free(&ulysses_comm);
  if (ring_comm != MPI_COMM_NULL) MPI_Comm_free(&ring_comm);
}

std::vector<index_t> owned_positions(index_t seq_len, int sp_size, int sp_rank, Layout layout) {
  std::vector<index_t> positions;
  if (layout == Layout::zigzag) {
    const index_t chunk = seq_len / (2 * sp_size);
    for (index_t c : {static_cast<index_t>(sp_rank), static_cast<index_t>(2 * sp_size - 1 - sp_rank)})
      for (index_t i = 0; i < chunk; ++i) positions.push_back(c * chunk + i);
  } else {
    const index_t n = seq_len / sp_size;
    for (index_t i = 0; i < n; ++i) positions.push_back(sp_rank * n + i);
  }
  return positions;
}

}  // namespace miniattn
