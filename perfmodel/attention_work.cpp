#include "perfmodel/attention_work.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "attention/strategy_record.hpp"
#include "model/synthetic_task.hpp"

namespace miniattn {

namespace {

// Positions offset + stride i, i < length: a chunk of a rank's rows.
struct Chunk {
  std::int64_t offset = 0, stride = 1, length = 0;
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// The chunks of ring group g (SP ranks gU .. gU + U - 1) in layout order.
std::vector<Chunk> group_chunks(Layout layout, std::int64_t N, std::int64_t P, std::int64_t U, std::int64_t g) {
  std::vector<Chunk> chunks;
  for (std::int64_t p = g * U; p < (g + 1) * U; ++p) {
    if (layout == Layout::zigzag) {
      const std::int64_t c = N / (2 * P);
      chunks.push_back({p * c, 1, c});
      chunks.push_back({(2 * P - 1 - p) * c, 1, c});
    } else if (layout == Layout::striped) {
      chunks.push_back({p, P, N / P});
    } else {
      chunks.push_back({p * (N / P), 1, N / P});
    }
  }
  return chunks;
}

// Query - key distances the mask lets through: [lo, hi].
struct Band {
  std::int64_t lo = 0, hi = 0;
};

Band visible_band(const ModelConfig& m) {
  const std::int64_t unbounded = 4 * m.seq_len, w = m.window;
  return {m.causal ? 0 : (w > 0 ? -(w - 1) : -unbounded), w > 0 ? w - 1 : unbounded};
}

// Packed documents (data.documents): every position p > 0 starts a document
// with probability rho = SyntheticTask::kDocumentsPerSample / N, independently,
// so no document starts in d given positions with probability (1 - rho)^d.
// The kernel computes a tile pair when the document ids at its ranges' ends
// meet (kernels::documents_meet): no start between the earlier tile's last
// position and the later tile's first (their gap); it computes it unmasked by
// documents when all four ends share one: no start over the pair's whole span.
// The documents change every step: the model counts expected keys. The gemm
// kernel's chunk pairs serve every sample of a micro-batch (its GEMMs span
// them): a pair runs when any of its b samples' documents meet, chance
// 1 - (1 - y)^b for one sample's chance y, which is
// sum_j (-1)^(j+1) C(b, j) y^j, and runs unmasked when none is cut, chance
// (1 - rho)^(b span). The fused kernel's tiles are one sample's (b = 1).
struct DocumentOdds {
  double log_stay = 0;  // log(1 - rho): 0 without documents, where every weight is 1
  int samples = 1;      // b
};

// Past 16 samples the alternating sum above would lose its digits: a larger
// micro-batch is counted as 16 samples, somewhat fewer pairs than run.
constexpr int kMostSharingSamples = 16;

DocumentOdds document_odds(const StepConfig& c) {
  if (!c.documents) return {};
  const double rho = static_cast<double>(SyntheticTask::kDocumentsPerSample) / static_cast<double>(c.model.seq_len);
  const std::int64_t micro_batch = c.model.batch / (static_cast<std::int64_t>(c.dp) * c.micro_batches);
  const int samples =
      c.blocking.runs_gemm() ? static_cast<int>(std::clamp<std::int64_t>(micro_batch, 1, kMostSharingSamples)) : 1;
  // N <= 4: every position starts a document; a finite log keeps 0 positions at chance 1 (exp(0)), any more at 0.
  return {rho < 1 ? std::log1p(-rho) : -1000.0, samples};
}

// sum over u < count of exp(log_x (first + slope u)), log_x <= 0: summed from
// the largest term, so that no partial sum overflows.
double geometric_run(double log_x, std::int64_t first, std::int64_t slope, std::int64_t count) {
  if (slope < 0) first += slope * (count - 1), slope = -slope;
  const double head = std::exp(log_x * static_cast<double>(first));
  if (slope == 0) return head * static_cast<double>(count);
  const double step = log_x * static_cast<double>(slope);
  return head * std::expm1(step * static_cast<double>(count)) / std::expm1(step);
}

// What a tile pair's documents must leave for it to count: ids that meet
// (the pair is computed), or one id at all four ends (computed unmasked).
enum class DocumentReach { meets, one_document };

// Key rows of key tiles t0 .. t1 of chunk k against the query tile at
// positions [qa, qz], each tile weighted by exp(log_x d), d its distance for
// the reach: the positions where no document may start.
double weighted_keys(std::int64_t qa, std::int64_t qz, const Chunk& k, std::int64_t kb, std::int64_t t0,
                     std::int64_t t1, double log_x, DocumentReach reach) {
  const std::int64_t S = k.stride, B = S * kb, E = S * (kb - 1);
  const auto distance = [&](std::int64_t ka, std::int64_t kz) {  // positions without a start, for the reach
    return reach == DocumentReach::meets ? std::max<std::int64_t>({0, qa - kz, ka - qz})
                                         : std::max(qz, kz) - std::min(qa, ka);
  };
  const auto tile_distance = [&](std::int64_t t) { return distance(k.offset + B * t, k.offset + B * t + E); };
  double sum = 0;
  const std::int64_t last_whole = std::min(t1, k.length / kb - 1);
  if (t1 > last_whole) {  // the chunk's last, partial tile
    const double keys = static_cast<double>(k.length - t1 * kb);
    sum += keys * std::exp(log_x * static_cast<double>(distance(k.offset + B * t1, k.offset + S * (k.length - 1))));
  }
  if (t0 > last_whole) return sum;
  // Whole tiles: the distance is linear in t between the tiles where a tile's
  // first or last position passes qa or qz: a geometric run on each stretch.
  std::array<std::int64_t, 6> cuts = {t0, last_whole + 1};
  int n = 2;
  for (const std::int64_t passed : {qa - k.offset, qz - k.offset, qa - k.offset - E, qz - k.offset - E})
    cuts[n++] = std::clamp(floor_div(passed, B) + 1, t0, last_whole + 1);  // the first tile past it
  std::sort(cuts.begin(), cuts.end());
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::int64_t a = cuts[i], count = cuts[i + 1] - a;
    if (count <= 0) continue;
    const std::int64_t first = tile_distance(a), slope = count > 1 ? tile_distance(a + 1) - first : 0;
    sum += static_cast<double>(kb) * geometric_run(log_x, first, slope, count);
  }
  return sum;
}

// The same weighted by the chance that the tiles' documents reach so in
// one of the samples a tile serves (meets) or in all of them (one_document).
double expected_keys(std::int64_t qa, std::int64_t qz, const Chunk& k, std::int64_t kb, std::int64_t t0,
                     std::int64_t t1, DocumentOdds odds, DocumentReach reach) {
  if (t0 > t1) return 0.0;
  if (odds.log_stay == 0) return static_cast<double>(std::min(k.length, (t1 + 1) * kb) - t0 * kb);
  const int b = odds.samples;
  if (reach == DocumentReach::one_document) return weighted_keys(qa, qz, k, kb, t0, t1, b * odds.log_stay, reach);
  double sum = 0, coefficient = 0;  // (-1)^(j+1) C(b, j)
  for (int j = 1; j <= b; ++j) {
    coefficient = j == 1 ? b : -coefficient * (b - j + 1) / j;
    sum += coefficient * weighted_keys(qa, qz, k, kb, t0, t1, j * odds.log_stay, reach);
  }
  return sum;
}

// Elements of the qb x kb tile pairs of chunks q, k (same stride) that the
// kernel computes, those whose distance range [near, far] meets the band: in
// tiles wholly inside the band (full) and in tiles on its edge; with packed
// documents, the expected elements, a tile the documents cut on the edge.
TileShare computed_area(const Chunk& q, const Chunk& k, const Band& band, std::int64_t qb, std::int64_t kb,
                        DocumentOdds odds = {}) {
  const std::int64_t S = q.stride, d = q.offset - k.offset;
  // Query row i sees key rows [i - before, i + after].
  const std::int64_t after = floor_div(d - band.lo, S), before = floor_div(band.hi - d, S);
  TileShare area;
  if (q.length - 1 + after < 0 || k.length - 1 < -before) return area;  // the whole chunk pair hidden
  for (std::int64_t i0 = 0; i0 < q.length; i0 += qb) {
    const std::int64_t i1 = std::min(i0 + qb, q.length);
    const std::int64_t first_key = std::max<std::int64_t>(0, i0 - before), last_start = i1 - 1 + after;
    if (first_key > k.length - 1 || last_start < 0) continue;
    const std::int64_t t_min = first_key / kb, t_max = std::min(last_start, k.length - 1) / kb;
    // The tiles every query row sees whole: key rows within [i1 - 1 - before, i0 + after].
    const std::int64_t seen_lo = i1 - 1 - before, seen_hi = i0 + after;
    const std::int64_t full_min = std::max(t_min, seen_lo <= 0 ? 0 : (seen_lo + kb - 1) / kb);
    const std::int64_t full_max = seen_hi >= k.length - 1 ? t_max : std::min(t_max, floor_div(seen_hi + 1, kb) - 1);
    const std::int64_t qa = q.offset + S * i0, qz = q.offset + S * (i1 - 1);
    const double rows = static_cast<double>(i1 - i0);
    const double full = rows * expected_keys(qa, qz, k, kb, full_min, full_max, odds, DocumentReach::one_document);
    area.full += full;
    area.edge += rows * expected_keys(qa, qz, k, kb, t_min, t_max, odds, DocumentReach::meets) - full;
  }
  return area;
}

// Key rows of the kernel's unit of work: values narrower than their compute
// type (bf16) give gemm pairs of half the keys (kernels::gemm_key_chunk), the
// memory plan's rule too.
std::int64_t key_tile(const StepConfig& c) {
  const ElementSizes sizes = element_sizes(c.model.precision);
  return c.blocking.key_tile(sizes.value != sizes.acc);
}

// A strategy that does not split the sequence ('local') sees one rank's
// positions as one contiguous block.
Layout work_layout(const StepConfig& c) {
  return strategy_record(c.strategy).splits_sequence ? c.layout : Layout::contiguous;
}

}  // namespace

bool slower_work(double blocks, double edge, double than_blocks, double than_edge) {
  const double rounding = 1e-12 * std::max(blocks, than_blocks);
  if (std::abs(blocks - than_blocks) > rounding) return blocks > than_blocks;
  return edge > than_edge + rounding;
}

TileShare block_tile_share(std::int64_t n, std::int64_t qb, std::int64_t kb, bool causal, std::int64_t window) {
  if (n <= 0) return {};
  ModelConfig m;
  m.seq_len = n;
  m.causal = causal;
  m.window = window;
  const TileShare area = computed_area({0, 1, n}, {0, 1, n}, visible_band(m), std::max<std::int64_t>(1, qb),
                                       std::max<std::int64_t>(1, kb));
  const double block = static_cast<double>(n) * static_cast<double>(n);
  return {area.full / block, area.edge / block};
}

RingWork ring_work(const StepConfig& c, int U, bool tile_level) {
  const ModelConfig& m = c.model;
  const Layout layout = work_layout(c);
  const bool zigzag = layout == Layout::zigzag;
  const int G = c.sp / U;
  const std::int64_t chunk = zigzag ? m.seq_len / (2 * c.sp) : m.seq_len / c.sp;
  // Diagonal chunk pair: the part on and below the diagonal, its tiles on
  // the diagonal the edge ones (elements: no edge).
  const TileShare diagonal =
      tile_level ? block_tile_share(chunk, c.blocking.query_tile(), key_tile(c), true, 0)
                 : TileShare{(static_cast<double>(chunk) + 1.0) / (2.0 * static_cast<double>(chunk)), 0.0};
  const double f = diagonal.computed();
  double first = 0, other = 0, diagonals = 0;  // diagonals: of the first step's (or every step's) chunk pairs
  if (!m.causal) {
    const double k = zigzag ? 2 * U : U;
    first = other = k * k;
  } else if (layout == Layout::striped) {
    // Striped: each rank's rows interleave with every other's, so every chunk
    // pair, its own or another rank's, is a diagonal one (the diagonal itself
    // in or out, one row in c): balanced at every step.
    first = other = U * U * f;
    diagonals = U * U;
  } else if (zigzag) {
    // Low chunks [gU, gU+U) and their mirrors: against another group 2 U^2 full
    // pairs; against itself U^2 full + two triangles of U(U-1)/2 full and U diagonal.
    first = U * U + U * (U - 1) + 2 * U * f;
    other = 2.0 * U * U;
    diagonals = 2 * U;
  } else {
    // Contiguous: the group's own U chunks form a triangle; at every later step
    // some group meets a group wholly before it (U^2 full pairs) and sets the pace.
    first = U * (U - 1) / 2.0 + U * f;
    other = static_cast<double>(U) * U;
    diagonals = U;
  }
  const bool diagonal_every_step = layout == Layout::striped;
  RingWork w;
  w.chunk = static_cast<double>(chunk);
  w.steps.assign(G, other);
  w.steps[0] = first;
  w.edge_steps.assign(G, diagonal_every_step ? diagonals * diagonal.edge : 0.0);
  w.edge_steps[0] = diagonals * diagonal.edge;
  w.slowest_total = first + (G - 1) * other;
  w.edge_total = std::accumulate(w.edge_steps.begin(), w.edge_steps.end(), 0.0);
  return w;
}

RingWork counted_ring_work(const StepConfig& c, int U, bool tile_level) {
  const ModelConfig& m = c.model;
  const Layout layout = work_layout(c);
  const std::int64_t P = c.sp, G = P / U, N = m.seq_len;
  const std::int64_t qb = tile_level ? std::max<std::int64_t>(1, c.blocking.query_tile()) : 1;
  const std::int64_t kb = tile_level ? std::max<std::int64_t>(1, key_tile(c)) : 1;
  // Chunk offsets are multiples of `unit`; the chunk of index o / unit (offset o) is ring group key_group[o / unit]'s.
  const Chunk first = group_chunks(layout, N, P, 1, 0)[0];
  const std::int64_t unit = layout == Layout::striped ? 1 : first.length;
  const std::int64_t chunks = layout == Layout::zigzag ? 2 * P : P;
  std::vector<std::int64_t> key_group(chunks);
  for (std::int64_t p = 0; p < P; ++p)
    for (const Chunk& chunk : group_chunks(layout, N, P, 1, p)) key_group[chunk.offset / unit] = p / U;
  RingWork w;
  w.chunk = static_cast<double>(first.length);
  // Every chunk has the same length and stride, so a pair's area (in c x c
  // blocks) depends on its offset difference d alone: areas[d - lo], for the
  // differences lo .. hi whose area is not zero.
  const Band band = visible_band(m);
  const DocumentOdds odds = document_odds(c);
  std::vector<TileShare> areas;
  std::int64_t lo = chunks;
  for (std::int64_t d = -(chunks - 1); d < chunks; ++d) {
    TileShare area =
        computed_area({d * unit, first.stride, first.length}, {0, first.stride, first.length}, band, qb, kb, odds);
    if (area.computed() == 0 && areas.empty()) continue;
    lo = std::min(lo, d);
    areas.push_back({area.full / (w.chunk * w.chunk), area.edge / (w.chunk * w.chunk)});
  }
  while (!areas.empty() && areas.back().computed() == 0) areas.pop_back();
  const std::int64_t hi = lo + static_cast<std::int64_t>(areas.size()) - 1;
  w.steps.assign(G, 0.0);
  w.edge_steps.assign(G, 0.0);
  std::vector<TileShare> work(G);  // group g's chunk pairs per step
  std::vector<std::int64_t> touched;
  for (std::int64_t g = 0; g < G; ++g) {
    for (const Chunk& q : group_chunks(layout, N, P, U, g)) {
      const std::int64_t qi = q.offset / unit;
      for (std::int64_t k = std::max<std::int64_t>(0, qi - hi); k <= std::min(chunks - 1, qi - lo); ++k) {
        const TileShare& area = areas[static_cast<std::size_t>(qi - k - lo)];
        if (area.computed() == 0) continue;
        const std::int64_t s = g >= key_group[k] ? g - key_group[k] : g - key_group[k] + G;
        if (work[s].computed() == 0) touched.push_back(s);
        work[s].full += area.full;
        work[s].edge += area.edge;
      }
    }
    TileShare total;
    for (const std::int64_t s : touched) {
      if (slower_work(work[s].computed(), work[s].edge, w.steps[s], w.edge_steps[s])) {
        w.steps[s] = work[s].computed();
        w.edge_steps[s] = work[s].edge;
      }
      total.full += work[s].full;
      total.edge += work[s].edge;
      work[s] = TileShare{};
    }
    touched.clear();
    if (slower_work(total.computed(), total.edge, w.slowest_total, w.edge_total)) {
      w.slowest_total = total.computed();
      w.edge_total = total.edge;
    }
  }
  return w;
}

}  // namespace miniattn
