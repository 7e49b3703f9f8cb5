// The attention tiles of a run, chosen per execution space (attention.hpp).
#include <initializer_list>

#include "core/error.hpp"
#include "kernels/attention_tiles.hpp"

namespace miniattn::kernels {

namespace {

using namespace attention_detail;

template <class T>
std::size_t largest_pass_scratch(index_t qb, index_t kb, index_t dh) {
  return std::max(forward_scratch_bytes<T>(qb, kb, dh), backward_scratch_bytes<T>(qb, kb, dh));
}

// The largest square tile side that fits level 0 with the requested sides kept
// (a side given as 0 is the one chosen); the smallest candidate when none fits.
template <class T>
index_t largest_fitting_side(const KernelConfig& requested, index_t dh, std::size_t level0_bytes) {
  const std::initializer_list<index_t> sides = {128, 96, 64, 48, 32, 16};
  for (const index_t side : sides) {
    const index_t qb = requested.query_block > 0 ? requested.query_block : side;
    const index_t kb = requested.key_block > 0 ? requested.key_block : side;
    if (largest_pass_scratch<T>(qb, kb, dh) <= level0_bytes) return side;
  }
  return *(sides.end() - 1);
}

}  // namespace

TeamScratchLimits TeamScratchLimits::of_backend() { return {level0_scratch_bytes(), !kHostExecution}; }

template <class T>
AttentionTiles choose_attention_tiles(const KernelConfig& requested, index_t head_dim,
                                      const TeamScratchLimits& limits) {
  const index_t side =
      limits.level1_is_global ? largest_fitting_side<T>(requested, head_dim, limits.level0_bytes) : kHostTileRows;
  AttentionTiles tiles;
  tiles.blocking.query_block = requested.query_block > 0 ? requested.query_block : side;
  tiles.blocking.key_block = requested.key_block > 0 ? requested.key_block : side;
  const index_t qb = tiles.blocking.query_block, kb = tiles.blocking.key_block;
  tiles.forward_scratch_bytes = forward_scratch_bytes<T>(qb, kb, head_dim);
  tiles.backward_scratch_bytes = backward_scratch_bytes<T>(qb, kb, head_dim);
  tiles.level0_bytes = limits.level0_bytes;
  const std::size_t needed = std::max(tiles.forward_scratch_bytes, tiles.backward_scratch_bytes);
  if (limits.level1_is_global && needed > limits.level0_bytes) {
    throw InputError("kernels.query_block, kernels.key_block: tiles of " + std::to_string(qb) + " x " +
                     std::to_string(kb) + " rows (head width " + std::to_string(head_dim) + ") need " +
                     std::to_string(needed) + " bytes of team scratch, but level 0 (on-chip) of this device holds " +
                     std::to_string(limits.level0_bytes) + "; give smaller tiles, or 0 to choose ones that fit");
  }
  tiles.scratch_level = needed <= limits.level0_bytes ? 0 : 1;
  return tiles;
}

template AttentionTiles choose_attention_tiles<float>(const KernelConfig&, index_t, const TeamScratchLimits&);
template AttentionTiles choose_attention_tiles<double>(const KernelConfig&, index_t, const TeamScratchLimits&);

}  // namespace miniattn::kernels
