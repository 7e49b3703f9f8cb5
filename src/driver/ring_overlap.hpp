#pragma once
// How much of the ring exchange hides behind compute. The ring posts the next
// K/V transfer before computing on the current block; the time it then waits
// is the exposed part. Here the same transfers are timed again without any
// compute in between ("alone"): hidden = 1 - exposed / alone.
#include <cstddef>

#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"

namespace miniattn {

struct RingOverlap {
  bool measured = false;
  double alone_seconds = 0.0;    // per step, transfers only
  double exposed_seconds = 0.0;  // per step, as measured during the run (ring.* exchanges)
  double hidden_fraction() const {
    if (alone_seconds <= 0) return 0.0;
    const double f = 1.0 - exposed_seconds / alone_seconds;
    return f < 0 ? 0.0 : f;
  }
};

// For ring and hybrid with more than one ring rank; block_elements: elements
// of one travelling K (or V, dK, dV) block. Collective over the world.
RingOverlap measure_ring_overlap(const Config& config, const ProcessGrid& grid, const Comm& run_comm,
                                 std::size_t scalar_bytes, index_t block_elements, double steps);

}  // namespace miniattn
