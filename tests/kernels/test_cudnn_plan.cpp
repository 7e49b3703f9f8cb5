// plan_block (kernels/attention/cudnn/block_plan.hpp) against the project's
// own mask predicate, AttentionMask::hides_position, pair by pair: every block
// every strategy computes (ring and allgather, Ulysses, hybrid) for every
// layout, rank count, shape and position mask of the sweep must be planned
// exactly, with legal cuDNN calls and without the gemm fallback, sharing rows
// between calls only where the header says, cut along query rows exactly; and
// a few blocks whose plans are known by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
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
  if (c.sample >= 0) s << " sample " << c.sample;
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

// What is wrong with the calls of one sample (those of `sample` and those of
// every sample) of a plan of n_q x n_k rows, pair (i, j) visible or not
// (empty: they are exact).
std::string sample_plan_error(const BlockPlan& plan, index_t n_q, index_t n_k, index_t sample,
                              const std::function<bool(index_t, index_t)>& visible) {
  if (plan.whole_block_fallback) return "whole-block fallback";
  std::vector<int> covered(static_cast<std::size_t>(n_q * n_k), 0), shown(covered.size(), 0);
  for (const CudnnCall& c : plan.calls) {
    if (c.sample >= 0 && c.sample != sample) continue;
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
      const bool seen = visible(i, j);
      if (shown[static_cast<std::size_t>(i * n_k + j)] != (seen ? 1 : 0))
        return "pair (" + std::to_string(i) + ", " + std::to_string(j) + ") " + (seen ? "visible" : "hidden") +
               " shown by " + std::to_string(shown[static_cast<std::size_t>(i * n_k + j)]) + " calls";
    }
  return "";
}

// What is wrong with a plan of the block q_pos x k_pos under mask (empty: it is exact).
std::string plan_error(const BlockPlan& plan, const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                       const AttentionMask& mask) {
  for (const CudnnCall& c : plan.calls)
    if (c.sample >= 0) return describe(c) + ": a call of one sample without documents";
  return sample_plan_error(plan, static_cast<index_t>(q_pos.size()), static_cast<index_t>(k_pos.size()), 0,
                           [&](index_t i, index_t j) {
                             return !mask.hides_position(q_pos[static_cast<std::size_t>(i)],
                                                         k_pos[static_cast<std::size_t>(j)]);
                           });
}

// The sweep's position masks at sequence length n: full, causal, causal and
// two-sided windows from one position to the whole sequence.
std::vector<PositionRules> masks_of(index_t n) {
  std::vector<PositionRules> masks = {{false, 0}, {true, 0}};
  for (const index_t w : {index_t{1}, index_t{2}, index_t{3}, index_t{5}, n / 2, n - 1, n})
    if (w > 0) masks.push_back({true, w});
  for (const index_t w : {index_t{1}, index_t{2}, index_t{4}, n / 2})
    if (w > 0) masks.push_back({false, w});
  return masks;
}

const char* strategy_of(int sp, int ulysses) {
  if (ulysses == 1) return "ring/allgather";
  return ulysses == sp ? "ulysses" : "hybrid";
}

// The maximal runs of positions in arithmetic progression, as [first, end)
// rows: the test's own count, independent of the planner's.
std::vector<std::pair<index_t, index_t>> position_runs(const std::vector<index_t>& pos) {
  std::vector<std::pair<index_t, index_t>> runs;
  const index_t n = static_cast<index_t>(pos.size());
  for (index_t first = 0; first < n;) {
    index_t end = first + 1;
    const auto at = [&](index_t i) { return pos[static_cast<std::size_t>(i)]; };
    if (end < n && at(end) > at(first)) {
      const index_t stride = at(end) - at(first);
      while (end < n && at(end) - at(end - 1) == stride) ++end;
    }
    runs.emplace_back(first, end);
    first = end;
  }
  return runs;
}

// What is wrong with how a plan shares rows between calls (empty: nothing),
// the rule block_plan.hpp promises, checked from the block's positions alone:
// - a query row whose visible keys are consecutive key rows of one position
//   run is in exactly one call, and without a window, a key row whose
//   visible queries are consecutive query rows of one run likewise (a window
//   over more queries than keys goes to cuDNN in pieces that share keys);
// - a query row is in no more calls than the key runs it sees, and without
//   a window a key row in no more than the query runs that see it;
// - without a window, a block is at most one call, but under hybrid with
//   striped positions (rank order: one call per pair of its U runs), at most
//   most_calls (0: no such bound).
std::string sharing_error(const BlockPlan& plan, const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                          const AttentionMask& mask, std::size_t most_calls) {
  if (most_calls > 0 && plan.calls.size() > most_calls)
    return std::to_string(plan.calls.size()) + " calls, more than " + std::to_string(most_calls);
  const auto side_error = [&](bool queries) -> std::string {
    const std::vector<index_t>& own = queries ? q_pos : k_pos;
    const std::vector<index_t>& other = queries ? k_pos : q_pos;
    const auto runs = position_runs(other);
    std::vector<int> run_of(other.size());
    for (std::size_t r = 0; r < runs.size(); ++r)
      for (index_t i = runs[r].first; i < runs[r].second; ++i) run_of[static_cast<std::size_t>(i)] = static_cast<int>(r);
    for (std::size_t i = 0; i < own.size(); ++i) {
      std::vector<std::size_t> seen;
      for (std::size_t j = 0; j < other.size(); ++j)
        if (!(queries ? mask.hides_position(own[i], other[j]) : mask.hides_position(other[j], own[i]))) seen.push_back(j);
      if (seen.empty()) continue;
      std::vector<int> seen_runs;
      for (const std::size_t j : seen) seen_runs.push_back(run_of[j]);
      seen_runs.erase(std::unique(seen_runs.begin(), seen_runs.end()), seen_runs.end());
      const bool one_interval = seen.back() - seen.front() + 1 == seen.size() && seen_runs.size() == 1;
      long calls = 0;
      for (const CudnnCall& c : plan.calls) {
        const index_t first = queries ? c.query_offset : c.key_offset, count = queries ? c.query_count : c.key_count;
        calls += static_cast<index_t>(i) >= first && static_cast<index_t>(i) < first + count;
      }
      const std::string row = std::string(queries ? "query" : "key") + " row " + std::to_string(i);
      if (one_interval && calls != 1) return row + " sees one run of rows but is in " + std::to_string(calls) + " calls";
      if (calls > static_cast<long>(seen_runs.size()))
        return row + " is in " + std::to_string(calls) + " calls for " + std::to_string(seen_runs.size()) + " runs";
    }
    return "";
  };
  const std::string queries = side_error(true);
  if (!queries.empty() || mask.window > 0) return queries;
  return side_error(false);
}

// The calls of a plan that hold query row i: of sample `sample` (calls of
// every sample included), or of any sample (sample < 0).
long calls_of_row(const BlockPlan& plan, index_t i, index_t sample = -1) {
  return static_cast<long>(std::count_if(plan.calls.begin(), plan.calls.end(), [&](const CudnnCall& c) {
    return (sample < 0 || c.sample < 0 || c.sample == sample) && i >= c.query_offset &&
           i < c.query_offset + c.query_count;
  }));
}

// What is wrong with a plan cut to rows_per_call query rows against the same
// block's uncut plan (both exact, checked apart): no call of more rows than
// the limit, no more pieces than the limit needs (at most ceil(q /
// rows_per_call) for each uncut call of q rows; fewer where the planner
// regroups the pieces a sliding window made; shorter pieces would be more),
// as many calls as the uncut plan's plus those counted as cut, and no query
// row in more calls than before (a cut shares key rows only).
std::string cut_error(const BlockPlan& cut, const BlockPlan& whole, index_t rows_per_call, index_t query_rows) {
  if (static_cast<index_t>(cut.calls.size()) != static_cast<index_t>(whole.calls.size()) + cut.cut_calls)
    return std::to_string(cut.calls.size()) + " calls, " + std::to_string(whole.calls.size()) + " uncut and " +
           std::to_string(cut.cut_calls) + " counted as cut";
  index_t needed = 0;
  for (const CudnnCall& call : whole.calls) needed += (call.query_count + rows_per_call - 1) / rows_per_call;
  if (static_cast<index_t>(cut.calls.size()) > needed)
    return std::to_string(cut.calls.size()) + " pieces where cuts of " + std::to_string(rows_per_call) +
           " rows need at most " + std::to_string(needed);
  for (const CudnnCall& piece : cut.calls)
    if (piece.query_count > rows_per_call) return describe(piece) + ": more rows than " + std::to_string(rows_per_call);
  for (index_t i = 0; i < query_rows; ++i)
    if (calls_of_row(cut, i) > calls_of_row(whole, i))
      return "query row " + std::to_string(i) + " in more calls once cut";
  return "";
}

// One block of the sweep: where it lies, its positions, its position rules.
struct SweepBlock {
  std::string where;
  int sp = 1, ulysses = 1;
  Layout layout = Layout::contiguous;
  index_t seq_len = 0;
  std::vector<index_t> q_pos, k_pos;
  PositionRules rules;
};

// Every (group, source) block of every strategy, layout and rank count 1-8,
// at 1, 2 and 3 rows per rank (contiguous and striped), 2, 4 and 6 (zigzag),
// under every mask of masks_of.
void for_each_sweep_block(const std::function<void(const SweepBlock&)>& check) {
  for (int sp = 1; sp <= 8; ++sp)
    for (int ulysses = 1; ulysses <= sp; ++ulysses) {
      if (sp % ulysses != 0) continue;
      for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
        for (index_t rows : {index_t{1}, index_t{2}, index_t{3}}) {
          const index_t seq_len = sp * (layout == Layout::zigzag ? 2 * rows : rows);
          for (int g = 0; g < sp / ulysses; ++g)
            for (int s = 0; s < sp / ulysses; ++s)
              for (const PositionRules& rules : masks_of(seq_len)) {
                SweepBlock block{"", sp, ulysses, layout, seq_len, group_positions(seq_len, sp, ulysses, g, layout),
                                 group_positions(seq_len, sp, ulysses, s, layout), rules};
                block.where = std::string(strategy_of(sp, ulysses)) + " P " + std::to_string(sp) + " U " +
                              std::to_string(ulysses) + " " + to_string(layout) + " N " + std::to_string(seq_len) +
                              " group " + std::to_string(g) + " source " + std::to_string(s) + " causal " +
                              std::to_string(rules.causal) + " window " + std::to_string(rules.window);
                check(block);
              }
        }
    }
}

struct SweepCount {
  long blocks = 0, calls = 0, banded_calls = 0, fallbacks = 0, cut_calls = 0;
};

// One block planned without documents: exact, sharing rows as the header says, cut exactly.
void check_block(const SweepBlock& b, SweepCount& count) {
  const bool hybrid_striped = b.layout == Layout::striped && b.ulysses > 1 && b.ulysses < b.sp;
  const AttentionMask mask(b.rules.causal, b.rules.window);
  const BlockPlan plan = plan_block(b.q_pos, b.k_pos, b.rules);
  ++count.blocks;
  count.fallbacks += plan.whole_block_fallback;
  EXPECT_EQ(plan_error(plan, b.q_pos, b.k_pos, mask), "") << b.where;
  EXPECT_EQ(plan.cut_calls, 0) << b.where;
  const std::size_t most_calls = b.rules.window > 0 ? 0 : hybrid_striped ? b.ulysses * b.ulysses : 1;
  EXPECT_EQ(sharing_error(plan, b.q_pos, b.k_pos, mask, most_calls), "") << b.where;
  for (const index_t rows_per_call : {index_t{1}, index_t{2}, index_t{3}}) {
    const BlockPlan cut = plan_block(b.q_pos, b.k_pos, b.rules, nullptr, rows_per_call);
    EXPECT_EQ(plan_error(cut, b.q_pos, b.k_pos, mask), "") << b.where << " rows per call " << rows_per_call;
    EXPECT_EQ(cut_error(cut, plan, rows_per_call, static_cast<index_t>(b.q_pos.size())), "")
        << b.where << " rows per call " << rows_per_call;
    count.cut_calls += cut.cut_calls;
  }
  count.calls += static_cast<long>(plan.calls.size());
  for (const CudnnCall& c : plan.calls) count.banded_calls += c.has_right_bound || c.has_left_bound;
}

// Every block of every strategy, layout and rank count 1-8, at 1, 2 and 3
// rows per rank (contiguous and striped), 2, 4 and 6 (zigzag), is planned
// exactly, without the gemm fallback, sharing rows only as block_plan.hpp
// says, and cut along query rows exactly.
TEST(CudnnPlan, EveryStrategyBlockIsPlannedExactly) {
  SweepCount count;
  for_each_sweep_block([&](const SweepBlock& block) { check_block(block, count); });
  std::cout << "checked " << count.blocks << " blocks, " << count.calls << " calls (" << count.banded_calls
            << " with a bound), " << count.fallbacks << " blocks on the gemm fallback; cuts of 1-3 rows added "
            << count.cut_calls << " calls\n";
  EXPECT_EQ(count.fallbacks, 0);
  EXPECT_GT(count.banded_calls, 0);
  EXPECT_GT(count.cut_calls, 0);
}

// Where the all-to-all puts each row: row i of the group's rank u lands where
// group_positions holds that rank's position i; a permutation, the identity
// where position order is rank order (contiguous), not under zigzag.
TEST(CudnnPlan, GatheredRowsPutEachRowAtItsPosition) {
  for (int sp = 1; sp <= 8; ++sp)
    for (int ulysses = 1; ulysses <= sp; ++ulysses) {
      if (sp % ulysses != 0) continue;
      for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
        for (int g = 0; g < sp / ulysses; ++g) {
          const index_t n = 4, seq_len = sp * n;
          const std::vector<index_t> gathered = group_positions(seq_len, sp, ulysses, g, layout);
          const std::vector<index_t> rows = gathered_rows(seq_len, sp, ulysses, g, layout);
          std::vector<int> hits(rows.size(), 0);
          for (int u = 0; u < ulysses; ++u) {
            const std::vector<index_t> own = owned_positions(seq_len, sp, g * ulysses + u, layout);
            for (index_t i = 0; i < n; ++i) {
              const index_t row = rows[static_cast<std::size_t>(u * n + i)];
              ASSERT_EQ(gathered[static_cast<std::size_t>(row)], own[static_cast<std::size_t>(i)]);
              ++hits[static_cast<std::size_t>(row)];
            }
          }
          EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
          const bool rank_order = layout == Layout::striped && ulysses > 1 && ulysses < sp;
          EXPECT_EQ(std::is_sorted(gathered.begin(), gathered.end()), !rank_order || ulysses == 1)
              << "P " << sp << " U " << ulysses << " " << to_string(layout);
        }
    }
  // Zigzag over P = 2 (chunks 0, 3 on rank 0; 1, 2 on rank 1): rank 1's rows land between rank 0's.
  EXPECT_EQ(gathered_rows(8, 2, 2, 0, Layout::zigzag), (std::vector<index_t>{0, 1, 6, 7, 2, 3, 4, 5}));
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
  expect_one_call(plan_block(own, own, causal), with_right_bound(call_of(0, 2 * c, 0, 2 * c), 0));
  // Earlier source (chunks 0 and 7): its first chunk, unmasked, for every query.
  expect_one_call(plan_block(own, owned_positions(n, 4, 0, Layout::zigzag), causal), call_of(0, 2 * c, 0, c));
  // Later source (chunks 2 and 5): every key, unmasked, for the second query chunk.
  expect_one_call(plan_block(own, owned_positions(n, 4, 2, Layout::zigzag), causal), call_of(c, c, 0, 2 * c));
}

TEST(CudnnPlan, StripedLaterSourceStartsOneRowLater) {
  // Rank 1 (1, 5, 9, 13) against source 2 (2, 6, 10, 14): the first query sees no key, the last key no query.
  const std::vector<index_t> own = owned_positions(16, 4, 1, Layout::striped);
  const std::vector<index_t> source = owned_positions(16, 4, 2, Layout::striped);
  expect_one_call(plan_block(own, source, {true, 0}), with_right_bound(call_of(1, 3, 0, 3), 0));
}

TEST(CudnnPlan, ContiguousEarlierSourceIsUnmasked) {
  const std::vector<index_t> own = owned_positions(32, 4, 2, Layout::contiguous);
  const std::vector<index_t> source = owned_positions(32, 4, 0, Layout::contiguous);
  expect_one_call(plan_block(own, source, {true, 0}), call_of(0, 8, 0, 8));
  // A later source shows nothing: no calls and no fallback.
  const BlockPlan later = plan_block(source, own, {true, 0});
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

// ---- packed documents

// Each sample's documents over positions 0 .. seq_len - 1: a position starts
// one with chance 1/3 (the test's own draw), and its id counts the starts up
// to it, as SyntheticTask::fill_documents numbers them.
std::vector<std::vector<index_t>> drawn_documents(index_t samples, index_t seq_len, std::uint64_t seed) {
  std::vector<std::vector<index_t>> ids(static_cast<std::size_t>(samples));
  for (auto& sample : ids) {
    index_t document = 0;
    for (index_t p = 0; p < seq_len; ++p) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      if (p > 0 && (seed >> 33) % 3 == 0) ++document;
      sample.push_back(document);
    }
  }
  return ids;
}

BlockDocuments block_documents(const std::vector<std::vector<index_t>>& ids, const std::vector<index_t>& q_pos,
                               const std::vector<index_t>& k_pos) {
  BlockDocuments documents{static_cast<index_t>(ids.size()), {}, {}};
  for (const auto& sample : ids) {
    for (const index_t p : q_pos) documents.query.push_back(sample[static_cast<std::size_t>(p)]);
    for (const index_t p : k_pos) documents.key.push_back(sample[static_cast<std::size_t>(p)]);
  }
  return documents;
}

// What is wrong with a plan of a block with documents (empty: nothing): every
// call of one sample; each sample's calls exact under the rules and its
// documents; no query row of a sample in more calls than the position plan
// (without documents) puts it in.
std::string documents_error(const BlockPlan& plan, const BlockPlan& position_plan, const std::vector<index_t>& q_pos,
                            const std::vector<index_t>& k_pos, const PositionRules& rules,
                            const std::vector<std::vector<index_t>>& ids) {
  const AttentionMask mask(rules.causal, rules.window);
  const index_t samples = static_cast<index_t>(ids.size());
  for (const CudnnCall& c : plan.calls)
    if (c.sample < 0 || c.sample >= samples) return describe(c) + ": not a call of one sample";
  for (index_t b = 0; b < samples; ++b) {
    const auto& doc = ids[static_cast<std::size_t>(b)];
    const std::string error = sample_plan_error(
        plan, static_cast<index_t>(q_pos.size()), static_cast<index_t>(k_pos.size()), b, [&](index_t i, index_t j) {
          const index_t q = q_pos[static_cast<std::size_t>(i)], k = k_pos[static_cast<std::size_t>(j)];
          return !mask.hides_position(q, k) && doc[static_cast<std::size_t>(q)] == doc[static_cast<std::size_t>(k)];
        });
    if (!error.empty()) return "sample " + std::to_string(b) + ": " + error;
    for (index_t i = 0; i < static_cast<index_t>(q_pos.size()); ++i)
      if (calls_of_row(plan, i, b) > calls_of_row(position_plan, i, b))
        return "sample " + std::to_string(b) + " query row " + std::to_string(i) + " in more calls than its positions'";
  }
  return "";
}

// One block with documents (its query and key rows may differ in number),
// planned exactly sample by sample, and cut along query rows exactly.
void check_documents_block(const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                           const PositionRules& rules, const std::vector<std::vector<index_t>>& ids,
                           const std::string& where, long& calls, long& fallbacks) {
  const BlockDocuments documents = block_documents(ids, q_pos, k_pos);
  const BlockPlan position_plan = plan_block(q_pos, k_pos, rules);
  const BlockPlan plan = plan_block(q_pos, k_pos, rules, &documents);
  fallbacks += plan.whole_block_fallback;
  calls += static_cast<long>(plan.calls.size());
  EXPECT_EQ(documents_error(plan, position_plan, q_pos, k_pos, rules, ids), "") << where;
  EXPECT_EQ(plan.cut_calls, 0) << where;
  for (const index_t rows_per_call : {index_t{1}, index_t{2}}) {
    const BlockPlan cut = plan_block(q_pos, k_pos, rules, &documents, rows_per_call);
    EXPECT_EQ(documents_error(cut, plan, q_pos, k_pos, rules, ids), "") << where << " cut " << rows_per_call;
    EXPECT_EQ(cut_error(cut, plan, rows_per_call, static_cast<index_t>(q_pos.size())), "")
        << where << " cut " << rows_per_call;
  }
}

// Every block of every strategy, layout, rank count 1-8, 1-3 rows a rank
// and mask, with two samples' drawn documents: planned exactly, sample by
// sample, without the gemm fallback, and cut along query rows exactly. Each
// block also with half its query rows, and with half its key rows: a plan
// that read one side's documents at the other side's stride would pass
// blocks of as many query rows as key rows.
TEST(CudnnPlan, EveryStrategyBlockWithDocumentsIsPlannedExactly) {
  long blocks = 0, calls = 0, fallbacks = 0;
  std::uint64_t seed = 17;
  for_each_sweep_block([&](const SweepBlock& b) {
    const auto ids = drawn_documents(2, b.seq_len, ++seed);
    const auto half = [](const std::vector<index_t>& p) {
      return std::vector<index_t>(p.begin(), p.begin() + static_cast<std::ptrdiff_t>((p.size() + 1) / 2));
    };
    check_documents_block(b.q_pos, b.k_pos, b.rules, ids, b.where, calls, fallbacks);
    ++blocks;
    if (b.q_pos.size() < 2) return;
    check_documents_block(half(b.q_pos), b.k_pos, b.rules, ids, b.where + " half the queries", calls, fallbacks);
    check_documents_block(b.q_pos, half(b.k_pos), b.rules, ids, b.where + " half the keys", calls, fallbacks);
    blocks += 2;
  });
  std::cout << "checked " << blocks << " blocks with documents: " << calls << " calls, " << fallbacks
            << " blocks on the gemm fallback\n";
  EXPECT_EQ(fallbacks, 0);
}

// A causal block of 8 contiguous positions, by hand: sample 0's documents
// [0, 3), [3, 5), [5, 8) are three causal calls; sample 1's one document is the
// whole block's call.
TEST(CudnnPlan, DocumentsOfACausalBlockAreCallsOfTheirOwn) {
  const std::vector<index_t> own = owned_positions(8, 1, 0, Layout::contiguous);
  const std::vector<std::vector<index_t>> ids = {{0, 0, 0, 1, 1, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0}};
  const BlockDocuments documents = block_documents(ids, own, own);
  const BlockPlan plan = plan_block(own, own, {true, 0}, &documents);
  ASSERT_FALSE(plan.whole_block_fallback);
  std::vector<std::string> calls;
  for (const CudnnCall& c : plan.calls) calls.push_back(describe(c));
  const auto causal_call = [](index_t first, index_t count, index_t sample) {
    CudnnCall c = with_right_bound(call_of(first, count, first, count), 0);
    c.sample = sample;
    return describe(c);
  };
  EXPECT_EQ(calls, (std::vector<std::string>{causal_call(0, 3, 0), causal_call(3, 2, 0), causal_call(5, 3, 0),
                                             causal_call(0, 8, 1)}));
}

// More query rows than key rows (full mask): q positions {0, 1}, k {0}; two
// samples, query documents {0, 1 | 0, 0}, key documents {0 | 0}. Sample 0's
// row 1 sees no key; sample 1 is one call over both rows.
TEST(CudnnPlan, DocumentsOfMoreQueriesThanKeys) {
  const BlockDocuments documents{2, {0, 1, 0, 0}, {0, 0}};
  const BlockPlan plan = plan_block({0, 1}, {0}, {false, 0}, &documents);
  ASSERT_FALSE(plan.whole_block_fallback);
  std::vector<std::string> calls;
  for (const CudnnCall& c : plan.calls) calls.push_back(describe(c));
  CudnnCall first = call_of(0, 1, 0, 1), second = call_of(0, 2, 0, 1);
  first.sample = 0;
  second.sample = 1;
  EXPECT_EQ(calls, (std::vector<std::string>{describe(first), describe(second)}));
}

// A document whose keys are not one stretch of the block's key rows is no
// document miniattn draws (they are position intervals): the block falls back.
TEST(CudnnPlan, DocumentKeysInTwoStretchesFallBack) {
  const std::vector<index_t> own = owned_positions(4, 1, 0, Layout::contiguous);
  const BlockDocuments documents{1, {0, 1, 0, 1}, {0, 1, 0, 1}};
  EXPECT_TRUE(plan_block(own, own, {false, 0}, &documents).whole_block_fallback);
}

// The documents must match the block.
TEST(CudnnPlan, DocumentsOfAnotherShapeAreRefused) {
  const std::vector<index_t> own = owned_positions(4, 1, 0, Layout::contiguous);
  const BlockDocuments documents{2, {0, 0, 0, 0}, {0, 0, 0, 0}};
  EXPECT_THROW(plan_block(own, own, {true, 0}, &documents), std::invalid_argument);
}

}  // namespace
}  // namespace miniattn::kernels
