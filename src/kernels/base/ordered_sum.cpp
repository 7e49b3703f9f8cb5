#include "kernels/base/ordered_sum.hpp"

#include <stdexcept>
#include <string>

#include "core/kokkos_compat.hpp"
#include "kernels/base/reduction.hpp"

namespace miniattn::kernels {

OrderedSum::OrderedSum(index_t max_count)
    : partials_("ordered_sum.partials", (max_count + kOrderedSumChunk - 1) / kOrderedSumChunk),
      host_partials_(Kokkos::create_mirror_view(partials_)) {}

namespace {

// partials(k) = the sum of chunk k (of squares if kSquares). A free function:
// CUDA's extended lambdas may not live in a private member function.
// Host: a thread a chunk, eight interleaved accumulators (a fixed order, and
// no single dependency chain), added in order at the end. GPU: a thread a
// chunk too, its vector lanes across the chunk (coalesced), summed as
// team_vector_sum sums a row: a thread walking 2048 values alone left the
// GPU nearly idle (H200, 2026-11-28: 135-229 us for the gradient norm).
template <class T, bool kSquares>
void chunk_sums(const View1<const T>& x, const View1<double>& partials, index_t chunks) {
  const index_t n = static_cast<index_t>(x.extent(0));
  if constexpr (kHostExecution) {
    Kokkos::parallel_for(
        "miniattn::ordered_sum", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, chunks),
        KOKKOS_LAMBDA(const index_t k) {
          const index_t end = (k + 1) * kOrderedSumChunk < n ? (k + 1) * kOrderedSumChunk : n;
          double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
          for (index_t i0 = k * kOrderedSumChunk; i0 < end; i0 += 8) {
            for (int j = 0; j < 8; ++j) {
              const double v = i0 + j < end ? static_cast<double>(x(i0 + j)) : 0.0;
              s[j] += kSquares ? v * v : v;
            }
          }
          double total = s[0];
          for (int j = 1; j < 8; ++j) total += s[j];
          partials(k) = total;
        });
  } else {
    using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
    Kokkos::parallel_for(
        "miniattn::ordered_sum", row_team_policy(chunks, kGpuMemoryRowsPerTeam), KOKKOS_LAMBDA(const Member& team) {
          const index_t k = team_row(team);
          if (k >= chunks) return;
          const index_t begin = k * kOrderedSumChunk;
          const index_t count = begin + kOrderedSumChunk < n ? kOrderedSumChunk : n - begin;
          const double total = team_vector_sum<double>(team, count, [&](const index_t c, int) {
            const double v = static_cast<double>(x(begin + c));
            return kSquares ? v * v : v;
          });
          Kokkos::single(Kokkos::PerThread(team), [&]() { partials(k) = total; });
        });
  }
}

}  // namespace

template <class T, bool kSquares>
double OrderedSum::reduce(const View1<const T>& x) const {
  const index_t n = static_cast<index_t>(x.extent(0));
  const index_t chunks = (n + kOrderedSumChunk - 1) / kOrderedSumChunk;
  if (chunks > static_cast<index_t>(partials_.extent(0)))
    throw std::invalid_argument("kernels::OrderedSum: " + std::to_string(n) + " values, room for " +
                                std::to_string(partials_.extent(0) * kOrderedSumChunk));
  chunk_sums<T, kSquares>(x, partials_, chunks);
  const auto used = Kokkos::make_pair(index_t(0), chunks);
  Kokkos::deep_copy(Kokkos::subview(host_partials_, used), Kokkos::subview(partials_, used));
  double total = 0.0;
  for (index_t k = 0; k < chunks; ++k) total += host_partials_(k);
  return total;
}

template <class T>
double OrderedSum::sum(const View1<const T>& x) const {
  return reduce<T, false>(x);
}

template <class T>
double OrderedSum::sum_of_squares(const View1<const T>& x) const {
  return reduce<T, true>(x);
}

template double OrderedSum::sum<float>(const View1<const float>&) const;
template double OrderedSum::sum<double>(const View1<const double>&) const;
template double OrderedSum::sum_of_squares<float>(const View1<const float>&) const;
template double OrderedSum::sum_of_squares<double>(const View1<const double>&) const;

}  // namespace miniattn::kernels
