#pragma once
// Sums of long arrays (the loss over rows, the squared gradient norm) that give
// the same bits for any number of threads: consecutive chunks of
// kOrderedSumChunk values are summed in double in parallel, each in a fixed
// order (in order on the host; over a GPU thread's vector lanes as
// team_vector_sum sums a row); then the chunk sums are added in order on the host.
#include "core/types.hpp"

namespace miniattn::kernels {

constexpr index_t kOrderedSumChunk = 2048;

class OrderedSum {
 public:
  // Room for arrays of up to max_count values (the workspace is allocated here, once).
  explicit OrderedSum(index_t max_count = 0);

  template <class T>
  double sum(const View1<const T>& x) const;
  template <class T>
  double sum_of_squares(const View1<const T>& x) const;

  std::size_t allocated_bytes() const { return partials_.span() * sizeof(double); }

 private:
  template <class T, bool kSquares>
  double reduce(const View1<const T>& x) const;

  View1<double> partials_;
  typename View1<double>::HostMirror host_partials_;
};

}  // namespace miniattn::kernels
