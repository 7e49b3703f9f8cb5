#pragma once
// The block walk of the tensor-core attention kernels (tensor_core_warp.hpp),
// without the device, so that its order and its buffers are tested on the
// host (test_block_walk.cpp): a team walks blocks of `block` rows of a
// sequence of n rows, `passes` times over (the key-gradient kernel: once for
// each query head of its K/V head), and folds the blocks the mask lets it see
// while the next visible one is copied into the other of two buffers.
#include <Kokkos_Core.hpp>

#include "core/kokkos_compat.hpp"
#include "core/types.hpp"

namespace miniattn::kernels::tensor_core {

// What a warp learns of a block when the walk finds it: whether its own rows
// may see some of the block's, and whether some pair may be hidden. Kept
// instead of the block's position range: two flags a thread instead of four
// registers through the fold of the block before.
struct WarpView {
  bool sees = false, partly = false;
};
struct VisibleBlock {
  index_t pass, first;  // pass == passes: none left
  WarpView warp;
};

// The first block at or after (pass, first) for which visible(pass, first,
// warp) holds: some row of the team may see it (and `warp` says what the
// calling warp's own rows may).
MINIATTN_HOST_OR_DEVICE_TEMPLATE
template <class Visible>
KOKKOS_INLINE_FUNCTION VisibleBlock next_visible_block(const Visible& visible, index_t n, index_t block,
                                                       index_t passes, index_t pass, index_t first) {
  for (; pass < passes; ++pass, first = 0)
    for (; first < n; first += block) {
      WarpView warp;
      if (visible(pass, first, warp)) return {pass, first, warp};
    }
  return {passes, n, WarpView{}};
}

// Every thread of the team runs the walk. stage(b, buffer) starts the copies
// of block b into a buffer (asynchronous ones are grouped by team.commit());
// team.wait_for_staged() returns once every copy but the newest group has
// landed in every thread; fold(b, buffer) reads block b there; team.barrier()
// keeps a buffer from being refilled before every warp is done with it.
MINIATTN_HOST_OR_DEVICE_TEMPLATE
template <class Team, class Visible, class Stage, class Fold>
KOKKOS_INLINE_FUNCTION void walk_visible_blocks(const Team& team, index_t n, index_t block, index_t passes,
                                                const Visible& visible, const Stage& stage, const Fold& fold) {
  VisibleBlock at = next_visible_block(visible, n, block, passes, 0, 0);
  if (at.pass < passes) stage(at, 0);
  team.commit();
  for (int buffer = 0; at.pass < passes; buffer ^= 1) {
    const VisibleBlock next = next_visible_block(visible, n, block, passes, at.pass, at.first + block);
    if (next.pass < passes) stage(next, buffer ^ 1);
    team.commit();
    team.wait_for_staged();
    fold(at, buffer);
    team.barrier();
    at = next;
  }
}

}  // namespace miniattn::kernels::tensor_core
