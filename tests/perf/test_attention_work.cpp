// The attention work per ring step (perfmodel/attention_work.*): the count
// under a mask against a brute force over the layout's own positions
// (owned_positions), tiled as the kernel tiles a group's rows and judged by
// the kernel's tile rule (kernels::tiles_meet), and against the closed forms
// where there is no window. With packed documents: against the expectation
// tile pair by tile pair, and that against documents drawn as the data draws
// them, judged by the kernel's document rule (kernels::documents_meet).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "kernels/attention/attention.hpp"
#include "model/synthetic_task.hpp"
#include "perfmodel/attention_work.hpp"

namespace miniattn {
namespace {

StepConfig step_config(Layout layout, bool causal, index_t window, int P, int U, index_t seq_len) {
  StepConfig c;
  c.model.seq_len = seq_len;
  c.model.causal = causal;
  c.model.window = window;
  c.strategy = U == P ? Strategy::ulysses : (U > 1 ? Strategy::hybrid : Strategy::ring);
  c.layout = layout;
  c.sp = P;
  c.ulysses = U;
  c.blocking.query_block = 4;
  c.blocking.key_block = 3;
  return c;
}

// Rows of ring group g: its U members' positions, member after member.
std::vector<index_t> group_rows(const StepConfig& c, int g) {
  std::vector<index_t> rows;
  for (int p = g * c.ulysses; p < (g + 1) * c.ulysses; ++p) {
    const std::vector<index_t> own = owned_positions(c.model.seq_len, c.sp, p, c.layout);
    rows.insert(rows.end(), own.begin(), own.end());
  }
  return rows;
}

// Elements of the tile pairs the kernel computes, by the kernel's own rule
// (kernels::AttentionMask::ranges_meet on each tile's position ranges): all of
// them, and those it computes with part of their pairs hidden (edge).
struct Area {
  double computed = 0, edge = 0;
};

// The tile pairs of q x k, tiled qb x kb as the kernel tiles them, that the
// mask's position rule does not hide wholly (AttentionMask::ranges_meet):
// visit(q_lo, q_hi, k_lo, k_hi, partly_masked, elements) with each tile's
// position ranges, whether the rule hides some of its pairs, and its size.
template <class Visit>
void tile_pairs_seen(const std::vector<index_t>& q, const std::vector<index_t>& k, const kernels::AttentionMask& mask,
                     index_t qb, index_t kb, const Visit& visit) {
  for (std::size_t i0 = 0; i0 < q.size(); i0 += qb)
    for (std::size_t j0 = 0; j0 < k.size(); j0 += kb) {
      const auto qt = std::minmax_element(q.begin() + i0, q.begin() + std::min(q.size(), i0 + qb));
      const auto kt = std::minmax_element(k.begin() + j0, k.begin() + std::min(k.size(), j0 + kb));
      bool partly_masked = false;
      if (!mask.ranges_meet(*qt.first, *qt.second, *kt.first, *kt.second, partly_masked)) continue;
      const std::size_t rows = std::min<std::size_t>(qb, q.size() - i0);
      visit(*qt.first, *qt.second, *kt.first, *kt.second, partly_masked,
            static_cast<double>(rows * std::min<std::size_t>(kb, k.size() - j0)));
    }
}

// With packed documents (stay = 1 - rho, rho the chance a position starts
// one; 1 without): each tile pair weighted by the chance no document starts
// in its gap (it is computed) and over its span (no document cuts it); for
// the gemm kernel, whose tiles serve `samples` samples at once, in the gap of
// any sample and over the span of every one.
Area brute_force_area(const std::vector<index_t>& q, const std::vector<index_t>& k, const ModelConfig& m, index_t qb,
                      index_t kb, double stay = 1, int samples = 1) {
  Area area;
  tile_pairs_seen(q, k, kernels::AttentionMask(m.causal, m.window), qb, kb,
                  [&](index_t q_lo, index_t q_hi, index_t k_lo, index_t k_hi, bool partly_masked, double tile) {
                    const index_t gap = std::max<index_t>({0, q_lo - k_hi, k_lo - q_hi});
                    const index_t span = std::max(q_hi, k_hi) - std::min(q_lo, k_lo);
                    const double meets = 1 - std::pow(1 - std::pow(stay, gap), samples);
                    const double uncut = std::pow(stay, span * samples);
                    area.computed += tile * meets;
                    area.edge += tile * (partly_masked ? meets : meets - uncut);
                  });
  return area;
}

double stay(const StepConfig& c) {
  return c.documents ? std::max(0.0, 1 - double(SyntheticTask::kDocumentsPerSample) / double(c.model.seq_len)) : 1.0;
}

RingWork brute_force_work(const StepConfig& c, bool tile_level) {
  const int G = c.sp / c.ulysses;
  const index_t qb = tile_level ? c.blocking.query_tile() : 1, kb = tile_level ? c.blocking.key_tile(false) : 1;
  const int samples = c.blocking.runs_gemm() ? static_cast<int>(c.model.batch) : 1;
  RingWork w;
  w.chunk = static_cast<double>(c.layout == Layout::zigzag ? c.model.seq_len / (2 * c.sp) : c.model.seq_len / c.sp);
  w.steps.assign(G, 0.0);
  w.edge_steps.assign(G, 0.0);
  for (int g = 0; g < G; ++g) {
    Area total;
    for (int s = 0; s < G; ++s) {
      const Area area =
          brute_force_area(group_rows(c, g), group_rows(c, (g - s + G) % G), c.model, qb, kb, stay(c), samples);
      const double blocks = area.computed / (w.chunk * w.chunk), edge = area.edge / (w.chunk * w.chunk);
      if (slower_work(blocks, edge, w.steps[s], w.edge_steps[s])) {
        w.steps[s] = blocks;
        w.edge_steps[s] = edge;
      }
      total.computed += blocks;
      total.edge += edge;
    }
    if (slower_work(total.computed, total.edge, w.slowest_total, w.edge_total)) {
      w.slowest_total = total.computed;
      w.edge_total = total.edge;
    }
  }
  return w;
}

std::string describe(const StepConfig& c) {
  return std::string(to_string(c.layout)) + (c.model.causal ? " causal" : " non-causal") + " window " +
         std::to_string(c.model.window) + " P " + std::to_string(c.sp) + " U " + std::to_string(c.ulysses);
}

// Equal up to the order of the sums (relative 1e-12).
void expect_same_work(const RingWork& a, const RingWork& b) {
  EXPECT_EQ(a.chunk, b.chunk);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  ASSERT_EQ(a.edge_steps.size(), b.edge_steps.size());
  for (std::size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_NEAR(a.steps[s], b.steps[s], 1e-12 * b.steps[s]) << s;
    EXPECT_NEAR(a.edge_steps[s], b.edge_steps[s], 1e-12 * b.steps[s]) << s;
  }
  EXPECT_NEAR(a.slowest_total, b.slowest_total, 1e-12 * b.slowest_total);
  EXPECT_NEAR(a.edge_total, b.edge_total, 1e-12 * b.slowest_total);
}

// Chunks of 12 rows (a multiple of both tiles: the kernel's tiles do not
// straddle chunks); windows hiding nothing, some tiles, whole chunks.
TEST(AttentionWork, CountMatchesBruteForceOverTheLayoutsPositions) {
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const bool causal : {true, false})
      for (const index_t window : {0, 1, 3, 5, 17, 40})
        for (const int P : {1, 2, 3, 4})
          for (const int U : {1, 2, 4}) {
            if (P % U != 0) continue;
            const StepConfig c = step_config(layout, causal, window, P, U, 12 * P * (layout == Layout::zigzag ? 2 : 1));
            SCOPED_TRACE(describe(c));
            for (const bool tile_level : {true, false}) {
              const RingWork counted = counted_ring_work(c, U, tile_level), brute = brute_force_work(c, tile_level);
              expect_same_work(counted, brute);
            }
          }
}

// Packed documents (about 5 a sample of 2 to 248 positions: short against
// the tiles): the expected tiles, over the layouts, masks, groups and tile
// shapes, with chunks of whole and partial tiles; fewer than without documents.
TEST(AttentionWork, DocumentsCountMatchesTheExpectationTileByTile) {
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const bool causal : {true, false})
      for (const index_t window : {0, 5})
        for (const int P : {1, 2, 4})
          for (const int U : {1, 2, 4}) {
            if (P % U != 0) continue;
            for (const auto& [qb, kb] : {std::pair<index_t, index_t>{4, 3}, {3, 5}, {7, 2}, {1, 1}})
              for (const index_t extra : {0, 1}) {
                const index_t chunk = 2 * qb * kb + extra;
                const index_t seq_len = chunk * P * (layout == Layout::zigzag ? 2 : 1);
                StepConfig c = step_config(layout, causal, window, P, U, seq_len);
                c.blocking.query_block = qb;
                c.blocking.key_block = kb;
                c.documents = true;
                SCOPED_TRACE(describe(c) + " tiles " + std::to_string(qb) + " x " + std::to_string(kb) + " chunk " +
                             std::to_string(chunk) + " documents");
                const RingWork counted = counted_ring_work(c, U, true);
                EXPECT_GT(counted.slowest_total, 0.0);  // a rank's own diagonal tiles are always computed
                // Partial tiles: exact where a rank holds one chunk (the kernel's tiles straddle zigzag's two).
                if (extra == 0 || (P == 1 && layout != Layout::zigzag))
                  expect_same_work(counted, brute_force_work(c, true));
                c.documents = false;
                EXPECT_LT(counted.slowest_total, counted_ring_work(c, U, true).slowest_total);
              }
          }
}

// The gemm kernel's chunk pairs serve every sample of the micro-batch: one
// runs where any sample's documents meet, uncut only where none is cut. Tiles
// of 4 x 4 over chunks of 8 and 9 rows, micro-batches of 1 to 3 samples
// (2 micro-batches of a batch of 6 on 1 data-parallel rank: 3).
TEST(AttentionWork, DocumentsOnTheGemmKernelCountEverySampleOfAPair) {
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const bool causal : {true, false})
      for (const int P : {1, 2, 4})
        for (const int U : {1, P})
          for (const index_t chunk : {8, 9}) {
            StepConfig c = step_config(layout, causal, 0, P, U, chunk * P * (layout == Layout::zigzag ? 2 : 1));
            c.blocking.kernel = AttentionKernel::gemm;
            c.blocking.chunk = 4;
            c.documents = true;
            double fewer_samples = 0;
            for (const index_t batch : {1, 2, 6}) {
              c.model.batch = batch;
              c.micro_batches = batch == 6 ? 2 : 1;
              SCOPED_TRACE(describe(c) + " chunk " + std::to_string(chunk) + " batch " + std::to_string(batch));
              const RingWork counted = counted_ring_work(c, U, true);
              if (chunk == 8 || (P == 1 && layout != Layout::zigzag)) {
                StepConfig one_micro_batch = c;  // the brute force reads the samples from the batch
                one_micro_batch.model.batch = batch / c.micro_batches;
                expect_same_work(counted, brute_force_work(one_micro_batch, true));
              }
              EXPECT_GT(counted.slowest_total, fewer_samples);
              fewer_samples = counted.slowest_total;
            }
          }
}

// At most 4 positions, each starts a document of its own (4 / N >= 1): only
// tile pairs that share a position are computed, all of them cut but for
// single positions. 1 x 1 tiles: the 4 diagonal pairs of 16, uncut; 2 x 2
// tiles: the 2 diagonal tiles, cut.
TEST(AttentionWork, DocumentsOfOnePositionEach) {
  for (const index_t side : {1, 2}) {
    StepConfig c = step_config(Layout::contiguous, true, 0, 1, 1, 4);
    c.blocking.query_block = c.blocking.key_block = side;
    c.documents = true;
    SCOPED_TRACE("tiles " + std::to_string(side));
    const RingWork counted = counted_ring_work(c, 1, true);
    expect_same_work(counted, brute_force_work(c, true));
    EXPECT_DOUBLE_EQ(counted.slowest_total, side == 1 ? 0.25 : 0.5);
    EXPECT_DOUBLE_EQ(counted.edge_total, side == 1 ? 0.0 : 0.5);
  }
}

// Document ids of the N positions of sample b at `step`, as the data draws them.
std::vector<index_t> drawn_documents(const SyntheticTask& task, index_t step, index_t b) {
  std::vector<index_t> document(static_cast<std::size_t>(task.seq_len), 0);
  for (index_t p = 1; p < task.seq_len; ++p) document[p] = document[p - 1] + (task.document_starts(step, b, p) ? 1 : 0);
  return document;
}

// The elements of rows x rows the kernel computes under those documents, by
// its rule on each tile pair: ranges_meet on the positions, then
// documents_meet on the ids at the ranges' ends of each sample the tile
// serves, run if any sample's meet, masked if any is cut or not all meet
// (AttentionMask::blocks_meet for one sample; the gemm kernel's
// ChunkPairs::meet, chunked_attention.cpp, for a micro-batch).
Area drawn_area(const std::vector<index_t>& rows, const std::vector<std::vector<index_t>>& samples, bool causal,
                index_t qb, index_t kb) {
  Area area;
  tile_pairs_seen(rows, rows, kernels::AttentionMask(causal, 0), qb, kb,
                  [&](index_t q_lo, index_t q_hi, index_t k_lo, index_t k_hi, bool partly_masked, double tile) {
                    bool any = false, all = true;
                    for (const std::vector<index_t>& d : samples) {
                      const bool meets = kernels::documents_meet(d[q_lo], d[q_hi], d[k_lo], d[k_hi], partly_masked);
                      any = any || meets;
                      all = all && meets;
                    }
                    if (!any) return;
                    area.computed += tile;
                    if (partly_masked || !all) area.edge += tile;
                  });
  return area;
}

// The mean of samples and its standard error.
struct Mean {
  double sum = 0, sum_sq = 0;
  int count = 0;
  void add(double x) { sum += x, sum_sq += x * x, ++count; }
  double value() const { return sum / count; }
  double error() const { return std::sqrt((sum_sq / count - value() * value()) / count); }
};

// The expectation against documents drawn as the data draws them
// (SyntheticTask::document_starts), judged by the kernels' rules (the fused
// kernel's tiles of one sample, the gemm kernel's of 2): the mean over 3000
// draws within 5 standard errors, on one ring group (G = 1) so that no
// maximum over groups enters.
TEST(AttentionWork, DocumentsExpectationMatchesDrawnDocuments) {
  SyntheticTask task;
  task.seed = 7;
  task.documents = true;
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const bool causal : {true, false})
      for (const int P : {1, 4})
        for (const index_t batch : {1, 2}) {
          StepConfig c = step_config(layout, causal, 0, P, P, 96);
          c.documents = true;
          c.model.batch = batch;
          if (batch == 2) {
            c.blocking.kernel = AttentionKernel::gemm;
            c.blocking.chunk = 4;
          }
          task.seq_len = c.model.seq_len;
          SCOPED_TRACE(describe(c) + " documents, " + to_string(c.blocking.kernel) + " batch " + std::to_string(batch));
          Mean computed, edge;
          for (int draw = 0; draw < 3000; ++draw) {
            std::vector<std::vector<index_t>> samples;
            for (index_t b = 0; b < batch; ++b) samples.push_back(drawn_documents(task, draw, b));
            const Area area =
                drawn_area(group_rows(c, 0), samples, causal, c.blocking.query_tile(), c.blocking.key_tile(false));
            computed.add(area.computed);
            edge.add(area.edge);
          }
          const RingWork counted = counted_ring_work(c, P, true);
          const double block = counted.chunk * counted.chunk;
          EXPECT_NEAR(counted.slowest_total * block, computed.value(), 5 * computed.error());
          EXPECT_NEAR(counted.edge_total * block, edge.value(), 5 * edge.error());
          EXPECT_GT(computed.error(), 0.0);
          EXPECT_GT(edge.error(), 0.0);
        }
}

// Without a window the count is the closed forms' (contiguous, zigzag, and
// striped within one group: U = 1), and at most them (striped groups of U > 1
// ranks, where the closed form counts every member pair as a diagonal one).
TEST(AttentionWork, CountMatchesClosedFormsWithoutWindow) {
  for (const Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (const bool causal : {true, false})
      for (const int P : {1, 2, 3, 4, 8})
        for (const int U : {1, 2, 4}) {
          if (P % U != 0) continue;
          for (const index_t chunk : {12, 13, 64}) {  // 13: partial tiles
            const StepConfig c = step_config(layout, causal, 0, P, U, chunk * P * (layout == Layout::zigzag ? 2 : 1));
            SCOPED_TRACE(describe(c) + " chunk " + std::to_string(chunk));
            for (const bool tile_level : {true, false}) {
              const RingWork counted = counted_ring_work(c, U, tile_level), closed = ring_work(c, U, tile_level);
              ASSERT_EQ(counted.steps.size(), closed.steps.size());
              if (layout != Layout::striped || U == 1 || !causal) {
                expect_same_work(counted, closed);
              } else {
                for (std::size_t s = 0; s < closed.steps.size(); ++s)
                  EXPECT_LE(counted.steps[s], closed.steps[s] * (1 + 1e-12));
                EXPECT_LE(counted.slowest_total, closed.slowest_total * (1 + 1e-12));
              }
            }
          }
        }
}

// One block: a causal block's edge tiles are its diagonal ones; under a
// window of one key tile every computed tile is on an edge (calibrate times
// the edge rate so); a full block has none.
TEST(AttentionWork, BlockTileShareSplitsTheDiagonalFromTheRest) {
  // 128 rows, 64 x 64 tiles: tile (1, 0) is whole, (0, 0) and (1, 1) cut by the diagonal.
  const TileShare causal = block_tile_share(128, 64, 64, true, 0);
  EXPECT_DOUBLE_EQ(causal.full, 0.25);
  EXPECT_DOUBLE_EQ(causal.edge, 0.5);
  const TileShare full = block_tile_share(128, 64, 64, false, 0);
  EXPECT_DOUBLE_EQ(full.full, 1.0);
  EXPECT_DOUBLE_EQ(full.edge, 0.0);
  // Uneven tiles: the same split as the brute force over positions 0 .. n-1.
  std::vector<index_t> positions(1000);
  std::iota(positions.begin(), positions.end(), index_t{0});
  for (const index_t qb : {16, 64, 96})
    for (const index_t kb : {16, 64, 96}) {
      const TileShare narrow = block_tile_share(4096, qb, kb, true, kb);
      EXPECT_EQ(narrow.full, 0.0) << qb << " x " << kb;
      EXPECT_GT(narrow.edge, 0.0) << qb << " x " << kb;
      for (const index_t window : {0, 100, 333}) {
        ModelConfig m;
        m.causal = true;
        m.window = window;
        const Area brute = brute_force_area(positions, positions, m, qb, kb);
        const TileShare share = block_tile_share(1000, qb, kb, true, window);
        EXPECT_NEAR(share.computed(), brute.computed / 1e6, 1e-15) << qb << " x " << kb << " window " << window;
        EXPECT_NEAR(share.edge, brute.edge / 1e6, 1e-15) << qb << " x " << kb << " window " << window;
      }
    }
}

// A window of w on N positions leaves N w - w^2 / 2 of the N^2 / 2 causal
// pairs; the kernel's tiles widen the band by at most a query and a key tile's
// span of positions (64 rows: 64 positions zigzag, 64 P striped). At N = 64K
// on 8 ranks, w = 4K, the slowest rank's total lies between its share of the
// band and of the widened band (zigzag and striped balance it), far below the
// causal total.
TEST(AttentionWork, WindowScalesTheWorkDown) {
  const double N = 65536, w = 4096, P = 8;
  for (const Layout layout : {Layout::zigzag, Layout::striped}) {
    StepConfig c = step_config(layout, true, 4096, 8, 1, 65536);
    c.blocking.query_block = c.blocking.key_block = 64;
    const RingWork counted = counted_ring_work(c, 1, true), causal = ring_work(c, 1, true);
    const double pairs = counted.slowest_total * counted.chunk * counted.chunk;
    const double span = 64 * (layout == Layout::striped ? P : 1);
    SCOPED_TRACE(to_string(layout));
    EXPECT_GT(pairs, (N * w - w * w / 2) / P);
    EXPECT_LT(pairs, N * (w + 2 * span) / P);
    EXPECT_LT(counted.slowest_total, 0.2 * causal.slowest_total);
  }
}

}  // namespace
}  // namespace miniattn
