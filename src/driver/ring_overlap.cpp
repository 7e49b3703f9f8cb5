#include "driver/ring_overlap.hpp"

#include <algorithm>
#include <memory>

#include "attention/block_reach.hpp"
#include "comm/watched_mpi.hpp"
#include "attention/strategy_table.hpp"

namespace miniattn {

namespace {

// The ring's transfer pattern of one training step, without compute: per
// layer, S-1 forward K/V shifts, S-1 backward K/V shifts and S dK/dV shifts
// (S = G ring steps but under a sliding window), each a pair of blocks posted
// together and then waited for.
template <class T>
double time_ring_pattern(Comm& comm, MPI_Comm ring, int ring_rank, int ring_size, int steps, index_t layers,
                         index_t block_elements) {
  View1<T> send_a("overlap.send_a", block_elements), send_b("overlap.send_b", block_elements);
  View1<T> recv_a("overlap.recv_a", block_elements), recv_b("overlap.recv_b", block_elements);
  const int next = (ring_rank + 1) % ring_size, prev = (ring_rank + ring_size - 1) % ring_size;
  const int pairs = static_cast<int>(layers) * (3 * steps - 2);
  watched_barrier(ring, "overlap_probe.start");
  const double t0 = MPI_Wtime();
  for (int i = 0; i < pairs; ++i) {
    PendingExchange pending;
    comm.post_shift(send_a.data(), recv_a.data(), block_elements, next, prev, ring, Exchange::overlap_probe, pending);
    comm.post_shift(send_b.data(), recv_b.data(), block_elements, next, prev, ring, Exchange::overlap_probe, pending);
    comm.wait(pending);
  }
  return MPI_Wtime() - t0;
}

}  // namespace

RingOverlap measure_ring_overlap(const Config& c, const ProcessGrid& grid, const Comm& run_comm,
                                 std::size_t scalar_bytes, index_t block_elements, double steps) {
  RingOverlap overlap;
  if (strategy_record(c.parallel.strategy).key_values != KeyValueRoute::ring || grid.ring_size < 2) return overlap;
  for (const auto& [label, s] : run_comm.stats())
    if (ring_exchange(label)) overlap.exposed_seconds += s.seconds / steps;
  const std::unique_ptr<Comm> comm = make_comm(c.parallel.comm, grid.world, c.parallel.gpu_aware_mpi);
  const int ring_step_count = ring_steps(c.model, c.parallel.layout, grid.sp_size, grid.ulysses_size);
  double best = 0.0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto time_as = [&](auto zero) {
      return time_ring_pattern<decltype(zero)>(*comm, grid.ring_comm, grid.ring_rank, grid.ring_size,
                                               ring_step_count, c.model.layers, block_elements);
    };
    const double t = scalar_bytes == sizeof(float)  ? time_as(float())
                     : scalar_bytes == sizeof(bf16) ? time_as(bf16())
                                                    : time_as(double());
    best = repeat == 0 ? t : std::min(best, t);
  }
  // The slowest rank sets the pace of a ring.
  watched_allreduce(&best, &overlap.alone_seconds, 1, MPI_DOUBLE, MPI_MAX, grid.world, "overlap_probe.max");
  double exposed = overlap.exposed_seconds;
  watched_allreduce(&exposed, &overlap.exposed_seconds, 1, MPI_DOUBLE, MPI_MAX, grid.world, "overlap_probe.max");
  overlap.measured = true;
  return overlap;
}

}  // namespace miniattn
