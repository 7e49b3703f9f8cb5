#pragma once
// Reductions whose result does not depend on the number of threads: every sum
// has a fixed order, fixed by the data's shape alone, so that a run gives the
// same bits on 1, 2 or 64 threads and on every repeat (no atomics, no
// thread-count-dependent tree).
//
//  * Row reductions (LayerNorm statistics, softmax): one thread per row
//    (row_team_policy); team_vector_sum / team_vector_max reduce a row in
//    SIMD packs on the host (lane by lane, then the lanes pairwise) and over the
//    thread's kGpuRowLanes vector lanes on a GPU (gpu_lanes.hpp: a warp or a
//    wavefront; each lane its columns in order, then Kokkos's fixed tree over
//    the lanes).
//  * Column sums (bias and LayerNorm parameter gradients): rows are cut into
//    chunks of kColumnSumChunkRows; each chunk sums its rows in order into its
//    own row of a partials workspace, then the chunks are summed in order.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/kokkos_compat.hpp"
#include "kernels/base/gpu_lanes.hpp"
#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

constexpr index_t kColumnSumChunkRows = 64;

// Rows of the partials workspace column_sums needs for `rows` rows.
inline index_t column_sum_chunks(index_t rows) { return (rows + kColumnSumChunkRows - 1) / kColumnSumChunkRows; }

// A thread per row: on the host a team of one thread of one lane per row (the
// league is the parallel loop, packs do the SIMD); on a GPU threads of
// kGpuRowLanes vector lanes, gpu_rows_per_team of them to a team. Teams of one
// warp let an SM hold only as many warps as it holds blocks (32 on Hopper,
// half its warps): kernels that wait on memory ask for more rows per team.
// A thread finds its row with team_row and returns when it is past the last.
// kGpuMemoryRowsPerTeam is that "more": the attention row kernels' 8 (measured
// on an H200, N = 32768, 2048-row chunks: a row a team kept the gemm kernel's
// row kernels at 60-70% of its bf16 time).
constexpr int kGpuMemoryRowsPerTeam = 8;
inline Kokkos::TeamPolicy<ExecSpace> row_team_policy(index_t rows, int gpu_rows_per_team = 1) {
  const int per_team = kHostExecution ? 1 : gpu_rows_per_team;
  const int lanes = kHostExecution ? 1 : std::min(Kokkos::TeamPolicy<ExecSpace>::vector_length_max(), kGpuRowLanes);
  return Kokkos::TeamPolicy<ExecSpace>(static_cast<int>((rows + per_team - 1) / per_team), per_team, lanes);
}
template <class Member>
KOKKOS_INLINE_FUNCTION index_t team_row(const Member& team) {
  return static_cast<index_t>(team.league_rank()) * team.team_size() + team.team_rank();
}

// A GPU lane's columns of a row: lane, lane + Lanes, ... (coalesced across the
// lanes), kGpuLoadsInFlight at a time: their terms are all asked for before
// the first is used, so that that many loads are in flight per lane (one at a
// time, the chunked-attention row kernels streamed 1.7 TB/s of an H200's 4.8,
// Kokkos's kernel timer). use(term) in column order; the same order on every
// run. Called once per lane index of ThreadVectorRange(team, Lanes);
// host-callable, so the tests walk every lane of both widths on the host.
constexpr int kGpuLoadsInFlight = 4;
MINIATTN_HOST_OR_DEVICE_TEMPLATE
template <class T, int Lanes = kGpuRowLanes, class F, class Use>
KOKKOS_FORCEINLINE_FUNCTION void gpu_lane_walk(index_t lane, index_t count, const F& f, const Use& use) {
  constexpr index_t lanes = Lanes, group = kGpuLoadsInFlight;
  index_t c = lane;
  for (; c + (group - 1) * lanes < count; c += group * lanes) {
    T terms[group];
    for (int u = 0; u < group; ++u) terms[u] = f(c + u * lanes, 1);
    for (int u = 0; u < group; ++u) use(terms[u]);
  }
  for (; c < count; c += lanes) use(f(c, 1));
}

// f(c0, width) as a whole pack whose lanes past width hold `identity`, the
// reduction's neutral value (f leaves them undefined): a row's last, partial pack.
template <class T, class F>
KOKKOS_FORCEINLINE_FUNCTION typename simd::Pack<T>::type padded_tail(const F& f, index_t c0, int width, T identity) {
  using V = typename simd::Pack<T>::type;
  T tail[simd::Pack<T>::lanes];
  for (int i = 0; i < simd::Pack<T>::lanes; ++i) tail[i] = identity;
  simd::pack_store_n(tail, V(f(c0, width)), width);
  return simd::pack_load<V>(tail);
}

// f(c0, width) -> pack of the terms of columns c0 .. c0 + width - 1 (lanes past
// width are ignored); returns their sum over c < count.
template <class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION T team_vector_sum(const Member& team, index_t count, const F& f) {
  using V = typename simd::Pack<T>::type;
  if constexpr (kHostExecution) {
    (void)team;
    constexpr int lanes = simd::Pack<T>::lanes;
    V acc = simd::pack_splat<V>(T(0));
    index_t c0 = 0;
    for (; c0 + lanes <= count; c0 += lanes) acc += f(c0, lanes);
    if (c0 < count) acc += padded_tail(f, c0, static_cast<int>(count - c0), T(0));
    return simd::pack_sum(acc);
  } else {
    T sum = T(0);
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, index_t(kGpuRowLanes)),
        [&](const index_t lane, T& a) { gpu_lane_walk<T>(lane, count, f, [&](const T x) { a += x; }); }, sum);
    return sum;
  }
}

// As team_vector_sum, the maximum (-inf for count = 0).
template <class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION T team_vector_max(const Member& team, index_t count, const F& f) {
  using V = typename simd::Pack<T>::type;
  const T lowest = -compat::infinity<T>();
  if constexpr (kHostExecution) {
    (void)team;
    constexpr int lanes = simd::Pack<T>::lanes;
    V acc = simd::pack_splat<V>(lowest);
    index_t c0 = 0;
    for (; c0 + lanes <= count; c0 += lanes) {
      const V x = f(c0, lanes);
      acc = x > acc ? x : acc;
    }
    if (c0 < count) {
      const V x = padded_tail(f, c0, static_cast<int>(count - c0), lowest);
      acc = x > acc ? x : acc;
    }
    return simd::pack_max(acc);
  } else {
    T m = lowest;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, index_t(kGpuRowLanes)),
        [&](const index_t lane, T& a) { gpu_lane_walk<T>(lane, count, f, [&](const T x) { a = x > a ? x : a; }); },
        Kokkos::Max<T>(m));
    return m;
  }
}

// f(c0, width) for each pack of columns c < count (width 1 on a GPU, lanes in parallel).
template <class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION void team_vector_for(const Member& team, index_t count, const F& f) {
  if constexpr (kHostExecution) {
    (void)team;
    constexpr int lanes = simd::Pack<T>::lanes;
    for (index_t c0 = 0; c0 < count; c0 += lanes) f(c0, count - c0 < lanes ? static_cast<int>(count - c0) : lanes);
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, count), [&](const index_t c) { f(c, 1); });
  }
}

// out[c] += sum over r < rows of term(r, c0, width)[c - c0], for c < cols.
// partials: workspace of at least column_sum_chunks(rows) x cols.
// Host: chunks in parallel, each walks its rows in order (row-major reads);
// GPU: (chunk, column) in parallel, consecutive threads on consecutive columns.
template <class T, class Term>
void add_column_sums(const char* label, index_t rows, index_t cols, const View2<T>& partials, const Term& term,
                     const View1<T>& out) {
  using V = typename simd::Pack<T>::type;
  const index_t chunks = column_sum_chunks(rows);
  if (rows <= 0 || cols <= 0) return;
  if (static_cast<index_t>(partials.extent(0)) < chunks || static_cast<index_t>(partials.extent(1)) < cols ||
      static_cast<index_t>(out.extent(0)) != cols) {
    throw std::invalid_argument(std::string("kernels::add_column_sums (") + label +
                                "): partials must be at least [chunks, cols] and out [cols]");
  }
  const index_t chunk_rows = kColumnSumChunkRows;
  if constexpr (kHostExecution) {
    constexpr int lanes = simd::Pack<T>::lanes;
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, chunks), KOKKOS_LAMBDA(const index_t k) {
          T* const partial = &partials(k, 0);
          for (index_t c = 0; c < cols; ++c) partial[c] = T(0);
          const index_t end = (k + 1) * chunk_rows < rows ? (k + 1) * chunk_rows : rows;
          for (index_t r = k * chunk_rows; r < end; ++r) {
            for (index_t c0 = 0; c0 < cols; c0 += lanes) {
              const int width = cols - c0 < lanes ? static_cast<int>(cols - c0) : lanes;
              simd::pack_store_n(partial + c0, V(simd::pack_load_n<V>(partial + c0, width) + term(r, c0, width)),
                                 width);
            }
          }
        });
  } else {
    simd::row_packs<T>(label, chunks, cols, KOKKOS_LAMBDA(const index_t k, const index_t c, const int) {
      const index_t end = (k + 1) * chunk_rows < rows ? (k + 1) * chunk_rows : rows;
      T sum = T(0);
      for (index_t r = k * chunk_rows; r < end; ++r) sum += term(r, c, 1);
      partials(k, c) = sum;
    });
  }
  // The chunks in order, walked as one lane walks a row (gpu_lane_walk with a
  // single lane): kGpuLoadsInFlight chunk sums asked for before they are
  // added. On a GPU this pass has only `cols` threads, and one load at a time
  // kept it at an L2 round trip a chunk (H200, 2026-11-28: 59 us for 512 chunks).
  simd::row_packs<T>(label, 1, cols, KOKKOS_LAMBDA(const index_t, const index_t c0, const int width) {
    V sum = simd::pack_load_n<V>(&partials(0, c0), width);
    gpu_lane_walk<V, 1>(
        1, chunks, [&](const index_t k, int) { return simd::pack_load_n<V>(&partials(k, c0), width); },
        [&](const V term) { sum += term; });
    simd::pack_store_n(&out(c0), V(simd::pack_load_n<V>(&out(c0), width) + sum), width);
  });
}

}  // namespace miniattn::kernels
