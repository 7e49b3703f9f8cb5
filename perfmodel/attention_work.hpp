#pragma once
// The attention work of one ring step on the slowest rank, in c x c chunk
// pairs of the rank's heads: closed forms per layout, and, under a sliding
// window or packed documents, a count of the tile pairs the blockwise kernel
// does not skip.
#include <cstdint>
#include <vector>

#include "perfmodel/performance_model.hpp"

namespace miniattn {

// steps[s]: chunk pairs of ring step s (keys of the group s places back) on
// the slowest group, for the ring's G = sp / U steps, U the Ulysses degree;
// slowest_total: the most any group does over all G (all-gather attention,
// which has no steps). edge_steps and edge_total: the part of those chunk
// pairs (of the same group) in tiles on a mask's edge, the tiles the kernel
// computes with part of their pairs hidden (kernels::tiles_meet's
// partly_masked), which cost more than the others (the mask, and rows of
// fewer tiles over which to spread staging the queries).
struct RingWork {
  double chunk = 0;  // c: N / (2 sp) zigzag, else N / sp
  std::vector<double> steps, edge_steps;
  double slowest_total = 0, edge_total = 0;
};

// Whether work of `blocks` chunk pairs, `edge` of them in edge tiles, is
// slower than `than_blocks` with `than_edge`: more pairs, or as many (to
// rounding: groups of equal work sum theirs in different orders) with more on an edge.
bool slower_work(double blocks, double edge, double than_blocks, double than_edge);

// Shares of an n x n block that the blockwise kernel computes with qb x kb
// tiles, in tiles no mask touches (full) and tiles on a mask's edge (edge).
struct TileShare {
  double full = 0, edge = 0;
  double computed() const { return full + edge; }
};

// Those shares for queries and keys at positions 0 .. n-1 under the mask
// `causal` and `window` (0: none).
TileShare block_tile_share(std::int64_t n, std::int64_t qb, std::int64_t kb, bool causal, std::int64_t window);

// Closed forms without a window, counting the tiles the blockwise kernel
// computes (tile_level) or the elements (RSA's dense kernels skip masked
// entries). A window or packed documents make them an upper bound.
RingWork ring_work(const StepConfig& config, int U, bool tile_level);

// The same by counting, chunk pair by chunk pair, the tile pairs whose
// position ranges the model's mask (causal, window) does not wholly hide, as
// kernels::tiles_meet decides (tile_level; else 1 x 1 tiles: elements). Exact
// for the kernel when c is a multiple of the tiles. With packed documents
// (config.documents), which change every step, the tiles expected under the
// data's document starts, those the documents cut counted as edge tiles. Its
// cost grows as G^2: used for windows and documents.
RingWork counted_ring_work(const StepConfig& config, int U, bool tile_level);

}  // namespace miniattn
