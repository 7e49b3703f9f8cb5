// plan_block (kernels/attention/cudnn/block_plan.hpp) against the project's
// own mask predicate, AttentionMask::hides_position, pair by pair: every block
// every strategy computes (ring and allgather, Ulysses, hybrid) for every
// layout, sequence length and position mask of the sweep must be planned
// exactly, with legal cuDNN calls and without the gemm fallback; and a few
// blocks whose plans are known by hand.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/cudnn/block_plan.hpp"

namespace miniattn::kernels {
namespace {

std::string describe(const CudnnCall& c) {
  std::ostringstream s;
  s << "call rows [" << c.query_offset << ", +" << c.query_count << ") keys [" << c.key_offset << ", +"
    << c.key_count << ")";
  if (c.has_right_bound) s << " right " << c.right_bound;
  if (c.has_left_bound) s << " left " << c.left_bound;
  return s.str();
}

// What is wrong with one call on its own (empty: nothing): its rectangle
// inside the block and not empty, its bounds legal and binding, every row
// seeing a key.
std::string call_error(const CudnnCall& c, index_t n_q, index_t n_k) {
  if (c.query_count <= 0 || c.key_count <= 0) return "empty rectangle";
  if (c.query_offset < 0 || c.key_offset < 0 || c.query_offset + c.query_count > n_q ||
      c.key_offset + c.key_count > n_k)
    return "rectangle outside the block";
  if (c.has_right_bound && c.right_bound < 0) return "negative right bound";
  if (c.has_left_bound && c.left_bound < 1) return "left bound < 1";
  // Row 0 holds the fewest keys on the right, the last row the fewest on the left.
  if (c.has_right_bound && c.right_bound >= c.key_count - 1) return "right bound that hides nothing";
  if (c.has_left_bound && c.left_bound >= c.query_count) return "left bound that hides nothing";
  // cuDNN: "Sliding window attention is only supported with max_s_q <= max_s_kv".
  if (c.has_left_bound && c.query_count > c.key_count) return "left bound over more queries than keys";
  for (index_t i = 0; i < c.query_count; ++i) {
    bool sees = false;
    for (index_t j = 0; j < c.key_count && !sees; ++j) sees = call_shows(c, c.query_offset + i, c.key_offset + j);
    if (!sees) return "row " + std::to_string(i) + " sees no key";
  }
  return "";
}

// What is wrong with a plan of the block q_pos x k_pos under mask (empty: it is exact).
std::string plan_error(const BlockPlan& plan, const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                       const AttentionMask& mask) {
  if (plan.whole_block_fallback) return "whole-block fallback";
  const index_t n_q = static_cast<index_t>(q_pos.size()), n_k = static_cast<index_t>(k_pos.size());
  std::vector<int> covered(static_cast<std::size_t>(n_q * n_k), 0), shown(covered.size(), 0);
  for (const CudnnCall& c : plan.calls) {
    const std::string error = call_error(c, n_q, n_k);
    if (!error.empty()) return describe(c) + ": " + error;
    for (index_t i = c.query_offset; i < c.query_offset + c.query_count; ++i)
      for (index_t j = c.key_offset; j < c.key_offset + c.key_count; ++j) {
        const std::size_t pair = static_cast<std::size_t>(i * n_k + j);
        if (++covered[pair] > 1) return describe(c) + ": overlaps another call at row " + std::to_string(i);
        shown[pair] += call_shows(c, i, j);
      }
  }
  for (index_t i = 0; i < n_q; ++i)
    for (index_t j = 0; j < n_k; ++j) {
      const bool visible = !mask.hides_position(q_pos[static_cast<std::size_t>(i)], k_pos[static_cast<std::size_t>(j)]);
      if (shown[static_cast<std::size_t>(i * n_k + j)] != (visible ? 1 : 0))
        return "pair (" + std::to_string(i) + ", " + std::to_string(j) + ") " + (visible ? "visible" : "hidden") +
               " shown by " + std::to_string(shown[static_cast<std::size_t>(i * n_k + j)]) + " calls";
    }
  return "";
}

// The sweep's position masks at sequence length n: full, causal, causal and
// two-sided windows from one position to the whole sequence.
std::vector<PositionRules> masks_of(index_t n) {
  std::vector<PositionRules> masks = {{false, 0}, {true, 0}};
  for (const index_t w : {index_t{1}, index_t{2}, index_t{3}, index_t{5}, n / 2, n - 1, n}) masks.push_back({true, w});
  for (const index_t w : {index_t{1}, index_t{2}, index_t{4}, n / 2}) masks.push_back({false, w});
  return masks;
}

const char* strategy_of(int sp, int ulysses) {
  if (ulysses == 1) return "ring/allgather";
  return ulysses == sp ? "ulysses" : "hybrid";
}

struct SweepCount {
  long blocks = 0, calls = 0, banded_calls = 0, fallbacks = 0;
};

// Where a plan may put a block on the gemm kernel without documents: where
// the rows of a Ulysses group interleave (zigzag, striped: each row's keys
// lie in several runs, a call each) or a window needs a tall call cut in
// pieces or splits rows over runs (block_plan.cpp, rows_shared). Ring and
// all-gather blocks without a window, and contiguous blocks without a
// window, always run on cuDNN.
bool may_fall_back(int ulysses, Layout layout, const PositionRules& rules) {
  return rules.window > 0 || (ulysses > 1 && layout != Layout::contiguous);
}

// Every (group, source) block of one grid, layout and sequence length, under every mask.
void check_grid(int sp, int ulysses, Layout layout, index_t seq_len, SweepCount& count) {
  const int groups = sp / ulysses;
  for (int g = 0; g < groups; ++g)
    for (int s = 0; s < groups; ++s) {
      const std::vector<index_t> q_pos = group_positions(seq_len, sp, ulysses, g, layout);
      const std::vector<index_t> k_pos = group_positions(seq_len, sp, ulysses, s, layout);
      for (const PositionRules& rules : masks_of(seq_len)) {
        const BlockPlan plan = plan_block(q_pos, k_pos, rules, false);
        if (plan.whole_block_fallback && may_fall_back(ulysses, layout, rules)) {
          EXPECT_TRUE(plan.calls.empty());
          ++count.fallbacks;
          ++count.blocks;
          continue;
        }
        EXPECT_EQ(plan_error(plan, q_pos, k_pos, AttentionMask(rules.causal, rules.window)), "")
            << strategy_of(sp, ulysses) << " P " << sp << " U " << ulysses << " " << to_string(layout) << " N "
            << seq_len << " group " << g << " source " << s << " causal " << rules.causal << " window "
            << rules.window;
        // cuDNN cannot mask by document: such blocks always go to the gemm kernel.
        const BlockPlan with_documents = plan_block(q_pos, k_pos, rules, true);
        EXPECT_TRUE(with_documents.whole_block_fallback && with_documents.calls.empty());
        ++count.blocks;
        count.calls += static_cast<long>(plan.calls.size());
        for (const CudnnCall& c : plan.calls) count.banded_calls += c.has_right_bound || c.has_left_bound;
      }
    }
}

// Every block is planned exactly; none falls back but where may_fall_back
// allows it (every pair of position runs of these layouts has equal strides,
// or at most two rows, which is one band).
TEST(CudnnPlan, EveryStrategyBlockIsPlannedExactly) {
  SweepCount count;
  for (int sp = 1; sp <= 8; ++sp)
    for (int ulysses = 1; ulysses <= sp; ++ulysses) {
      if (sp % ulysses != 0) continue;
      for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
        for (index_t c = 1; c <= 4; ++c) check_grid(sp, ulysses, layout, 2 * sp * c, count);
    }
  std::cout << "checked " << count.blocks << " blocks, " << count.calls << " calls (" << count.banded_calls
            << " with a bound), " << count.fallbacks << " blocks on the gemm fallback\n";
  // The sweep is what it claims: 3 layouts x 4 lengths x 13 masks x (the sum over P of G^2 for every G dividing
  // P: 248) blocks.
  EXPECT_EQ(count.blocks, 3L * 4 * 13 * 248);
  EXPECT_GT(count.banded_calls, 1000);
}

CudnnCall call_of(index_t query_offset, index_t query_count, index_t key_offset, index_t key_count) {
  CudnnCall c;
  c.query_offset = query_offset;
  c.query_count = query_count;
  c.key_offset = key_offset;
  c.key_count = key_count;
  return c;
}
CudnnCall with_right_bound(CudnnCall c, index_t bound) {
  c.has_right_bound = true;
  c.right_bound = bound;
  return c;
}

void expect_one_call(const BlockPlan& plan, const CudnnCall& expected) {
  ASSERT_FALSE(plan.whole_block_fallback);
  ASSERT_EQ(plan.calls.size(), 1u);
  EXPECT_EQ(describe(plan.calls[0]), describe(expected));
}

// Transformer Engine's zigzag plans, P = 4, chunks of c = 3 rows, rank 1 (chunks 1 and 6).
TEST(CudnnPlan, ZigzagStepsAreOneCallEach) {
  const index_t c = 3, n = 8 * c;
  const PositionRules causal{true, 0};
  const std::vector<index_t> own = owned_positions(n, 4, 1, Layout::zigzag);
  // Diagonal step: one causal call over both chunks.
  expect_one_call(plan_block(own, own, causal, false), with_right_bound(call_of(0, 2 * c, 0, 2 * c), 0));
  // Earlier source (chunks 0 and 7): its first chunk, unmasked, for every query.
  expect_one_call(plan_block(own, owned_positions(n, 4, 0, Layout::zigzag), causal, false), call_of(0, 2 * c, 0, c));
  // Later source (chunks 2 and 5): every key, unmasked, for the second query chunk.
  expect_one_call(plan_block(own, owned_positions(n, 4, 2, Layout::zigzag), causal, false), call_of(c, c, 0, 2 * c));
}

TEST(CudnnPlan, StripedLaterSourceStartsOneRowLater) {
  // Rank 1 (1, 5, 9, 13) against source 2 (2, 6, 10, 14): the first query sees no key, the last key no query.
  const std::vector<index_t> own = owned_positions(16, 4, 1, Layout::striped);
  const std::vector<index_t> source = owned_positions(16, 4, 2, Layout::striped);
  expect_one_call(plan_block(own, source, {true, 0}, false), with_right_bound(call_of(1, 3, 0, 3), 0));
}

TEST(CudnnPlan, ContiguousEarlierSourceIsUnmasked) {
  const std::vector<index_t> own = owned_positions(32, 4, 2, Layout::contiguous);
  const std::vector<index_t> source = owned_positions(32, 4, 0, Layout::contiguous);
  expect_one_call(plan_block(own, source, {true, 0}, false), call_of(0, 8, 0, 8));
  // A later source shows nothing: no calls and no fallback.
  const BlockPlan later = plan_block(source, own, {true, 0}, false);
  EXPECT_FALSE(later.whole_block_fallback);
  EXPECT_TRUE(later.calls.empty());
}

TEST(CudnnPlan, CallShowsNothingOutsideItsRectangle) {
  CudnnCall c = with_right_bound(call_of(2, 3, 4, 3), 0);
  c.has_left_bound = true;
  c.left_bound = 2;
  EXPECT_TRUE(call_shows(c, 2, 4));
  EXPECT_FALSE(call_shows(c, 2, 5));    // right of the diagonal
  EXPECT_TRUE(call_shows(c, 4, 5));     // inside the band of width 2
  EXPECT_FALSE(call_shows(c, 4, 4));    // left of the band
  EXPECT_FALSE(call_shows(c, 1, 3));    // before the rectangle on both sides
  EXPECT_FALSE(call_shows(c, 5, 6));    // after its last row
}

}  // namespace
}  // namespace miniattn::kernels
