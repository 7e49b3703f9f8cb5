// The tensor-core kernels' block walk (src/kernels/attention/tensor_core/block_walk.hpp), run on
// the host with a team that records what the walk asks of it: every block
// the mask lets the team see is folded once, in order, from the buffer it
// was staged into, with what the walk learnt of it for the warp; its copies
// belong to a group older than the newest when the team waits
// (cp.async.wait_group 1 leaves only the newest in flight); no buffer is
// refilled before the team has passed a barrier since it was folded.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/attention/tensor_core/block_walk.hpp"

namespace {

namespace tc = miniattn::kernels::tensor_core;
using miniattn::index_t;

struct Event {
  enum Kind { stage, commit, wait, fold, barrier } kind;
  index_t pass = -1, first = -1;
  int buffer = -1;
  tc::WarpView warp;
};

struct RecordingTeam {
  std::vector<Event>* log;
  void commit() const { log->push_back({Event::commit, -1, -1, -1, {}}); }
  void wait_for_staged() const { log->push_back({Event::wait, -1, -1, -1, {}}); }
  void barrier() const { log->push_back({Event::barrier, -1, -1, -1, {}}); }
};

// Visibility of block `first` in pass `pass`, and what it tells the warp.
struct Pattern {
  index_t n, block, passes;
  std::vector<bool> seen;  // [pass][block]
  bool visible(index_t pass, index_t first) const { return seen[pass * blocks() + first / block]; }
  index_t blocks() const { return (n + block - 1) / block; }
  static tc::WarpView warp_of(index_t pass, index_t first) { return {(pass + first) % 3 != 0, first % 2 == 0}; }
};

std::vector<Event> walk(const Pattern& p) {
  std::vector<Event> log;
  const auto visible = [&](index_t pass, index_t first, tc::WarpView& warp) {
    if (!p.visible(pass, first)) return false;
    warp = Pattern::warp_of(pass, first);
    return true;
  };
  const auto stage = [&](const tc::VisibleBlock& b, int buffer) {
    log.push_back({Event::stage, b.pass, b.first, buffer, b.warp});
  };
  const auto fold = [&](const tc::VisibleBlock& b, int buffer) {
    log.push_back({Event::fold, b.pass, b.first, buffer, b.warp});
  };
  tc::walk_visible_blocks(RecordingTeam{&log}, p.n, p.block, p.passes, visible, stage, fold);
  return log;
}

// The checks above, on one recorded walk.
void check_walk(const Pattern& p, const std::vector<Event>& log, const std::string& name) {
  std::vector<std::pair<index_t, index_t>> expected, folded;
  for (index_t pass = 0; pass < p.passes; ++pass)
    for (index_t first = 0; first < p.n; first += p.block)
      if (p.visible(pass, first)) expected.emplace_back(pass, first);
  int groups = 0;                       // closed copy groups
  std::vector<int> group_of(log.size(), -1);
  int staged_at[2] = {-1, -1};          // the log entry of each buffer's latest stage
  bool barrier_since_fold[2] = {true, true};
  int newest_at_wait = -1;              // newest closed group at the latest wait
  for (std::size_t i = 0; i < log.size(); ++i) {
    const Event& e = log[i];
    if (e.kind == Event::commit) ++groups;
    if (e.kind == Event::wait) newest_at_wait = groups - 1;
    if (e.kind == Event::barrier) barrier_since_fold[0] = barrier_since_fold[1] = true;
    if (e.kind == Event::stage) {
      ASSERT_TRUE(e.buffer == 0 || e.buffer == 1) << name;
      EXPECT_TRUE(barrier_since_fold[e.buffer]) << name << ": buffer " << e.buffer << " refilled while in use";
      staged_at[e.buffer] = static_cast<int>(i);
      group_of[i] = groups;  // closed by the next commit
    }
    if (e.kind == Event::fold) {
      folded.emplace_back(e.pass, e.first);
      const int s = staged_at[e.buffer];
      ASSERT_GE(s, 0) << name << ": folding a buffer never staged";
      EXPECT_EQ(log[s].pass, e.pass) << name;
      EXPECT_EQ(log[s].first, e.first) << name << ": the buffer holds another block";
      EXPECT_LT(group_of[s], newest_at_wait) << name << ": the block's copies may still be in flight";
      EXPECT_EQ(e.warp.sees, Pattern::warp_of(e.pass, e.first).sees) << name;
      EXPECT_EQ(e.warp.partly, Pattern::warp_of(e.pass, e.first).partly) << name;
      barrier_since_fold[e.buffer] = false;
    }
  }
  EXPECT_EQ(folded, expected) << name;
}

TEST(BlockWalk, FoldsEveryVisibleBlockOnceFromItsBuffer) {
  std::mt19937 rng(7);
  for (const index_t n : {index_t(1), index_t(64), index_t(200), index_t(640)})
    for (const index_t passes : {index_t(1), index_t(3)}) {
      Pattern p{n, 64, passes, {}};
      const index_t cells = passes * p.blocks();
      std::vector<bool> first_only(cells, false), last_only(cells, false), random(cells);
      first_only.front() = true;
      last_only.back() = true;
      for (index_t i = 0; i < cells; ++i) random[i] = rng() % 3 != 0;
      const std::vector<std::pair<std::string, std::vector<bool>>> cases = {
          {"all", std::vector<bool>(cells, true)}, {"none", std::vector<bool>(cells, false)},
          {"first only", first_only}, {"last only", last_only}, {"random", random}};
      for (const auto& [label, seen] : cases) {
        p.seen = seen;
        const std::string name = label + ", n " + std::to_string(n) + ", " + std::to_string(passes) + " passes";
        check_walk(p, walk(p), name);
      }
    }
}

TEST(BlockWalk, NextVisibleBlockCrossesPasses) {
  Pattern p{130, 64, 2, {false, false, true, true, false, false}};  // 3 blocks a pass
  const auto visible = [&](index_t pass, index_t first, tc::WarpView& warp) {
    warp = Pattern::warp_of(pass, first);
    return p.visible(pass, first);
  };
  const tc::VisibleBlock b = tc::next_visible_block(visible, p.n, p.block, p.passes, 0, 0);
  EXPECT_EQ(b.pass, 0);
  EXPECT_EQ(b.first, 128);
  const tc::VisibleBlock c = tc::next_visible_block(visible, p.n, p.block, p.passes, b.pass, b.first + p.block);
  EXPECT_EQ(c.pass, 1);
  EXPECT_EQ(c.first, 0);
  const tc::VisibleBlock none = tc::next_visible_block(visible, p.n, p.block, p.passes, c.pass, c.first + p.block);
  EXPECT_EQ(none.pass, p.passes);
}

}  // namespace
