#pragma once
// The attention work of one ring step on the slowest rank, in c x c chunk
// pairs of the rank's heads: closed forms per layout, and, under a sliding
// window, a count of the tile pairs the blockwise kernel does not skip.
#include <cstdint>
#include <vector>

#include "perfmodel/performance_model.hpp"

namespace miniattn {

// steps[s]: chunk pairs of ring step s (keys of the group s places back) on
// the slowest group, for the ring's G = sp / U steps, U the Ulysses degree;
// slowest_total: the most any group does over all G (all-gather attention,
// which has no steps).
struct RingWork {
  double chunk = 0;  // c: N / (2 sp) zigzag, else N / sp
  std::vector<double> steps;
  double slowest_total = 0;
};

// Closed forms without a window, counting the tiles the blockwise kernel
// computes (tile_level) or the elements (RSA's dense kernels skip masked
// entries). A window makes them an upper bound.
RingWork ring_work(const StepConfig& config, int U, bool tile_level);

// The same by counting, chunk pair by chunk pair, the tile pairs whose
// position ranges the model's mask (causal, window) does not wholly hide, as
// kernels::tiles_meet decides (tile_level; else 1 x 1 tiles: elements). Exact
// for the kernel when c is a multiple of the tiles; documents are not
// modelled (they change every step). Its cost grows as G^2: used for windows.
RingWork counted_ring_work(const StepConfig& config, int U, bool tile_level);

}  // namespace miniattn
