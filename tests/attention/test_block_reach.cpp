// ring_steps() (a closed form per layout) against the farthest block each
// group of a ring really needs, found pair by pair from the positions; and
// block_visible() against a double loop over the positions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "attention/block_reach.hpp"
#include "comm/process_grid.hpp"

namespace miniattn {
namespace {

// Independent of kernels::AttentionMask: the mask's rule written out.
bool sees(index_t q, index_t k, bool causal, index_t window) {
  if (causal && k > q) return false;
  return window == 0 || std::abs(q - k) < window;
}

bool naive_visible(const std::vector<index_t>& queries, const std::vector<index_t>& keys, bool causal, index_t window) {
  for (const index_t q : queries)
    for (const index_t k : keys)
      if (sees(q, k, causal, window)) return true;
  return false;
}

// Ring group g holds the positions of SP ranks gU .. gU + U - 1 (attention_factory.cpp).
std::vector<std::vector<index_t>> group_rows(index_t seq_len, int sp, int ulysses, Layout layout) {
  std::vector<std::vector<index_t>> rows(static_cast<std::size_t>(sp / ulysses));
  for (int r = 0; r < sp; ++r) {
    const std::vector<index_t> owned = owned_positions(seq_len, sp, r, layout);
    auto& row = rows[static_cast<std::size_t>(r / ulysses)];
    row.insert(row.end(), owned.begin(), owned.end());
  }
  return rows;
}

TEST(BlockReach, RingStepsAreTheFarthestBlockAnyGroupNeeds) {
  const index_t seq_len = 48;
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const int sp : {1, 2, 3, 4, 6, 8})
      for (int ulysses = 1; ulysses <= sp; ++ulysses) {
        if (sp % ulysses != 0) continue;
        const auto rows = group_rows(seq_len, sp, ulysses, layout);
        const int G = static_cast<int>(rows.size());
        for (const bool causal : {true, false})
          for (const index_t window : {0, 1, 2, 3, 4, 5, 7, 11, 13, 25, 47, 100}) {
            int farthest = 0;
            for (int g = 0; g < G; ++g)
              for (int d = 1; d < G; ++d)
                if (naive_visible(rows[static_cast<std::size_t>(g)], rows[static_cast<std::size_t>((g - d + G) % G)],
                                  causal, window))
                  farthest = std::max(farthest, d);
            ModelConfig m;
            m.seq_len = seq_len;
            m.causal = causal;
            m.window = window;
            EXPECT_EQ(ring_steps(m, layout, sp, ulysses), 1 + farthest)
                << to_string(layout) << " sp " << sp << " U " << ulysses << " causal " << causal << " w " << window;
          }
      }
  // One by hand: 8 contiguous ranks of 6 rows, causal window 3: a rank's
  // first row reaches back 2 positions, into the rank before it only.
  ModelConfig m;
  m.seq_len = seq_len;
  m.causal = true;
  m.window = 3;
  EXPECT_EQ(ring_steps(m, Layout::contiguous, 8, 1), 2);
}

TEST(BlockReach, BlockVisibleIsExact) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<index_t> position(0, 99);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<index_t> queries(1 + trial % 5), keys(1 + trial % 7);
    for (auto& q : queries) q = position(rng);
    for (auto& k : keys) k = position(rng);
    for (const bool causal : {true, false})
      for (const index_t window : {0, 1, 2, 6, 30}) {
        EXPECT_EQ(block_visible(queries, keys, kernels::AttentionMask(causal, window)),
                  naive_visible(queries, keys, causal, window));
      }
  }
}

}  // namespace
}  // namespace miniattn
