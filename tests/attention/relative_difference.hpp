#pragma once
// How far one attention result lies from another, for the benchmarks that
// check a kernel against a reference before timing it (bench_attention,
// bench_cudnn_documents): sqrt(sum (a - b)^2 / sum b^2) over every element,
// computed where the Views live.
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace miniattn::bench {

template <class T>
double relative_difference(const View4<T>& a, const View4<T>& b) {
  const T* pa = a.data();
  const T* pb = b.data();
  const Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>> all(0, a.span());
  double diff = 0, norm = 0;
  Kokkos::parallel_reduce(
      "bench::relative_difference", all,
      KOKKOS_LAMBDA(std::size_t i, double& sum) {
        const double x = static_cast<double>(widen(pa[i])), y = static_cast<double>(widen(pb[i]));
        sum += (x - y) * (x - y);
      },
      diff);
  Kokkos::parallel_reduce(
      "bench::relative_norm", all,
      KOKKOS_LAMBDA(std::size_t i, double& sum) {
        const double y = static_cast<double>(widen(pb[i]));
        sum += y * y;
      },
      norm);
  return std::sqrt(diff / (norm > 0 ? norm : 1));
}

}  // namespace miniattn::bench
