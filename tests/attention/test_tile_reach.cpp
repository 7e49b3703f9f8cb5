// attention_detail::TileReach (kernels/attention/fused/bf16_tiles.hpp): which
// register tiles of a bf16 tile pair on a mask's edge the fused kernel
// computes and which pairs each product adds up, against the mask's own
// predicate pair by pair. Every visible pair's register tile must be computed
// and inside the ranges of all three kinds of products (scores by columns,
// dv/dk by rows, O and dq by columns), every register tile in a range must be
// computed, and a causal diagonal must skip the register tiles that hold no
// visible pair.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "kernels/attention/fused/bf16_tiles.hpp"

namespace miniattn {
namespace {

using kernels::AttentionMask;
using kernels::attention_detail::kBf16Cols;
using kernels::attention_detail::kBf16Rows;
using kernels::attention_detail::IndexRange;
using kernels::attention_detail::TileReach;

std::vector<index_t> positions_from(index_t first, index_t count) {
  std::vector<index_t> p(static_cast<std::size_t>(count));
  std::iota(p.begin(), p.end(), first);
  return p;
}

bool contains(IndexRange range, index_t x) { return range.begin <= x && x < range.end; }

struct Reached {
  TileReach reach;
  index_t computed = 0, holding_visible = 0, total = 0;  // register tiles
};

// Checks every pair and every register tile of keys kpos x queries qpos.
Reached check_reach(const AttentionMask& mask, const std::vector<index_t>& kpos, const std::vector<index_t>& qpos) {
  const index_t nk = static_cast<index_t>(kpos.size()), nq = static_cast<index_t>(qpos.size());
  Reached out;
  out.reach.of_mask(mask, true, 0, kpos.data(), nk, qpos.data(), nq);
  const TileReach& reach = out.reach;
  for (index_t r0 = 0; r0 < nk; r0 += kBf16Rows)
    for (index_t c0 = 0; c0 < nq; c0 += kBf16Cols) {
      bool visible = false;
      for (index_t j = r0; j < std::min(r0 + kBf16Rows, nk); ++j)
        for (index_t i = c0; i < std::min(c0 + kBf16Cols, nq); ++i) {
          if (mask.hides(0, qpos[std::size_t(i)], kpos[std::size_t(j)])) continue;
          visible = true;
          EXPECT_TRUE(contains(reach.keys(c0), j)) << "key " << j << " query " << i << ": scores and softmax";
          EXPECT_TRUE(contains(reach.key_pairs(c0), j / 2)) << "key " << j << " query " << i << ": O and dq";
          EXPECT_TRUE(contains(reach.query_pairs(r0), i / 2)) << "key " << j << " query " << i << ": dv and dk";
        }
      const bool computed = reach.computes(r0, c0);
      EXPECT_TRUE(computed || !visible) << "register tile (" << r0 << ", " << c0 << ")";
      out.computed += computed;
      out.holding_visible += visible;
      ++out.total;
    }
  // What the products read was computed.
  for (index_t c0 = 0; c0 < nq; c0 += kBf16Cols) {
    const IndexRange keys = reach.keys(c0);
    for (index_t r0 = keys.begin; r0 < keys.end; r0 += kBf16Rows)
      EXPECT_TRUE(reach.computes(r0, c0)) << "keys of column tile " << c0;
    if (keys.begin < keys.end) {
      EXPECT_EQ(keys.begin % kBf16Rows, 0) << "column tile " << c0;  // its pairs start on a register tile
    }
  }
  for (index_t r0 = 0; r0 < nk; r0 += kBf16Rows) {
    const IndexRange pairs = reach.query_pairs(r0);
    for (index_t c0 = 2 * pairs.begin; c0 < 2 * pairs.end; c0 += kBf16Cols)
      EXPECT_TRUE(reach.computes(r0, c0)) << "queries of row tile " << r0;
  }
  return out;
}

TEST(TileReach, CausalDiagonalComputesOnlyTheRegisterTilesWithAVisiblePair) {
  const std::vector<index_t> diagonal = positions_from(1000, 192);
  const Reached r = check_reach(AttentionMask(true), diagonal, diagonal);
  EXPECT_EQ(r.total, 24 * 6);
  EXPECT_EQ(r.holding_visible, 84);  // query tile c sees key tiles 0 .. 4c + 3
  EXPECT_EQ(r.computed, r.holding_visible);
}

TEST(TileReach, EveryVisiblePairIsReachedOnMasksEdges) {
  struct Case {
    std::string name;
    AttentionMask mask;
    std::vector<index_t> kpos, qpos;
  };
  std::vector<index_t> zigzag = positions_from(0, 96), late = positions_from(700, 96);
  zigzag.insert(zigzag.end(), late.begin(), late.end());  // a rank's two chunks in one tile
  // Query tiles out of position order (the kernels do not need order): a row
  // of keys sees tiles 0, 2 and 4, not 1 and 3, which it computes all the same
  // for dv and dk, which add over its whole range of queries.
  std::vector<index_t> shuffled;
  for (index_t c = 0; c < 6; ++c) {
    const std::vector<index_t> tile = positions_from(c % 2 == 0 ? 1000 + 16 * c : 16 * c, kBf16Cols);
    shuffled.insert(shuffled.end(), tile.begin(), tile.end());
  }
  const std::vector<Case> cases = {
      {"causal, odd key tile", AttentionMask(true), positions_from(1100, 101), positions_from(1000, 192)},
      {"causal, query tile of 45", AttentionMask(true), positions_from(1000, 192), positions_from(1150, 45)},
      {"causal window 70", AttentionMask(true, 70), positions_from(1000, 192), positions_from(1100, 192)},
      {"window 50", AttentionMask(false, 50), positions_from(1000, 192), positions_from(1060, 192)},
      {"causal, zigzag queries", AttentionMask(true), positions_from(50, 192), zigzag},
      {"causal, query tiles out of order", AttentionMask(true), positions_from(1000, 192), shuffled},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Reached r = check_reach(c.mask, c.kpos, c.qpos);
    EXPECT_LT(r.computed, r.total) << "a tile pair on the mask's edge skips some register tile";
  }
}

TEST(TileReach, PackedDocumentsAreReached) {
  using Memory = View2<index_t>::memory_space;
  if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible)
    GTEST_SKIP() << "the bf16 fused kernel runs on host backends only";
  const index_t n = 1400;
  View2<index_t> ids("document_ids", 1, n);
  for (index_t p = 0; p < n; ++p) ids(0, p) = p < 1050 ? 0 : (p < 1130 ? 1 : 2);
  const std::vector<index_t> tile = positions_from(1000, 192);
  const Reached r = check_reach(AttentionMask(true).with_documents(ids), tile, tile);
  EXPECT_LT(r.computed, r.total);
}

TEST(TileReach, WholeTileReachesEverything) {
  TileReach reach;
  reach.whole(101, 45);
  EXPECT_TRUE(reach.computes(96, 32));
  EXPECT_EQ(reach.keys(32).begin, 0);
  EXPECT_EQ(reach.keys(32).end, 101);
  EXPECT_EQ(reach.key_pairs(0).end, 51);  // the odd key's zero half-pair
  EXPECT_EQ(reach.query_pairs(96).end, 23);
}

}  // namespace
}  // namespace miniattn
