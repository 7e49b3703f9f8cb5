#include "perfmodel/attention_work.hpp"

#include <algorithm>

#include "attention/strategy_record.hpp"

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

// Elements of the qb x kb tile pairs of chunks q, k (same stride) that the
// kernel computes: those whose distance range [near, far] meets the band.
double computed_area(const Chunk& q, const Chunk& k, const Band& band, std::int64_t qb, std::int64_t kb) {
  const std::int64_t S = q.stride, d = q.offset - k.offset;
  // Tile rows [i0, i1) meet key tile rows [j0, j1) iff j0 <= i1 - 1 + after and j1 - 1 >= i0 - before.
  const std::int64_t after = floor_div(d - band.lo, S), before = floor_div(band.hi - d, S);
  if (q.length - 1 + after < 0 || k.length - 1 < -before) return 0;  // the whole chunk pair hidden
  double area = 0;
  for (std::int64_t i0 = 0; i0 < q.length; i0 += qb) {
    const std::int64_t i1 = std::min(i0 + qb, q.length);
    const std::int64_t first_key = std::max<std::int64_t>(0, i0 - before), last_start = i1 - 1 + after;
    if (first_key > k.length - 1 || last_start < 0) continue;
    const std::int64_t t_min = first_key / kb, t_max = std::min(last_start, k.length - 1) / kb;
    if (t_min > t_max) continue;
    area += static_cast<double>(i1 - i0) * static_cast<double>(std::min(k.length, (t_max + 1) * kb) - t_min * kb);
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

RingWork ring_work(const StepConfig& c, int U, bool tile_level) {
  const ModelConfig& m = c.model;
  const Layout layout = work_layout(c);
  const bool zigzag = layout == Layout::zigzag;
  const int G = c.sp / U;
  const std::int64_t chunk = zigzag ? m.seq_len / (2 * c.sp) : m.seq_len / c.sp;
  // Diagonal chunk pair: the part on and below the diagonal.
  const double f = tile_level ? causal_diagonal_fraction(chunk, c.blocking.query_tile(), key_tile(c))
                              : (static_cast<double>(chunk) + 1.0) / (2.0 * static_cast<double>(chunk));
  double first = 0, other = 0;
  if (!m.causal) {
    const double k = zigzag ? 2 * U : U;
    first = other = k * k;
  } else if (layout == Layout::striped) {
    // Striped: each rank's rows interleave with every other's, so every chunk
    // pair, its own or another rank's, is a diagonal one (the diagonal itself
    // in or out, one row in c): balanced at every step.
    first = other = U * U * f;
  } else if (zigzag) {
    // Low chunks [gU, gU+U) and their mirrors: against another group 2 U^2 full
    // pairs; against itself U^2 full + two triangles of U(U-1)/2 full and U diagonal.
    first = U * U + U * (U - 1) + 2 * U * f;
    other = 2.0 * U * U;
  } else {
    // Contiguous: the group's own U chunks form a triangle; at every later step
    // some group meets a group wholly before it (U^2 full pairs) and sets the pace.
    first = U * (U - 1) / 2.0 + U * f;
    other = static_cast<double>(U) * U;
  }
  RingWork w;
  w.chunk = static_cast<double>(chunk);
  w.steps.assign(G, other);
  w.steps[0] = first;
  w.slowest_total = first + (G - 1) * other;
  return w;
}

RingWork counted_ring_work(const StepConfig& c, int U, bool tile_level) {
  const ModelConfig& m = c.model;
  const Layout layout = work_layout(c);
  const std::int64_t P = c.sp, G = P / U, N = m.seq_len;
  const std::int64_t qb = tile_level ? std::max<std::int64_t>(1, c.blocking.query_tile()) : 1;
  const std::int64_t kb = tile_level ? std::max<std::int64_t>(1, key_tile(c)) : 1;
  // Chunk offsets are multiples of `unit`; the chunk of index o / unit (offset o) is SP rank owner[o / unit]'s.
  const Chunk first = group_chunks(layout, N, P, 1, 0)[0];
  const std::int64_t unit = layout == Layout::striped ? 1 : first.length;
  const std::int64_t chunks = layout == Layout::zigzag ? 2 * P : P;
  std::vector<std::int64_t> owner(chunks);
  for (std::int64_t p = 0; p < P; ++p)
    for (const Chunk& chunk : group_chunks(layout, N, P, 1, p)) owner[chunk.offset / unit] = p;
  // Every chunk has the same length and stride, so a pair's area depends on
  // its offset difference alone: the differences whose area is not zero.
  const Band band = visible_band(m);
  std::vector<std::pair<std::int64_t, double>> reach;  // (offset difference / unit, area)
  for (std::int64_t d = -(chunks - 1); d < chunks; ++d) {
    const double area =
        computed_area({d * unit, first.stride, first.length}, {0, first.stride, first.length}, band, qb, kb);
    if (area > 0) reach.emplace_back(d, area);
  }
  RingWork w;
  w.chunk = static_cast<double>(first.length);
  const double block = w.chunk * w.chunk;
  w.steps.assign(G, 0.0);
  std::vector<double> work(G, 0.0);  // group g's chunk pairs per step
  std::vector<std::int64_t> touched;
  for (std::int64_t g = 0; g < G; ++g) {
    for (const Chunk& q : group_chunks(layout, N, P, U, g))
      for (const auto& [d, area] : reach) {
        const std::int64_t k = q.offset / unit - d;  // the key chunk's index
        if (k < 0 || k >= chunks) continue;
        const std::int64_t s = (g - owner[k] / U + G) % G;
        if (work[s] == 0) touched.push_back(s);
        work[s] += area / block;
      }
    double total = 0;
    for (const std::int64_t s : touched) {
      w.steps[s] = std::max(w.steps[s], work[s]);
      total += work[s];
      work[s] = 0;
    }
    touched.clear();
    w.slowest_total = std::max(w.slowest_total, total);
  }
  return w;
}

}  // namespace miniattn
