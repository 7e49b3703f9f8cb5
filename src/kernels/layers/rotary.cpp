// Rotary position embeddings (rotary.hpp).
#include "kernels/layers/rotary.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn::kernels {

namespace {

using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;

// The first position of p's document in a row of non-decreasing ids.
KOKKOS_INLINE_FUNCTION index_t document_start(const View2<const index_t>& ids, index_t b, index_t p) {
  const index_t id = ids(b, p);
  index_t lo = 0, hi = p;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const index_t mid = lo + (hi - lo) / 2;
    if (ids(b, mid) < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace

template <class A>
void rotary_table(const View1<const index_t>& positions, const View2<const index_t>& documents, double theta,
                  const View3<A>& cos, const View3<A>& sin) {
  const index_t n = positions.extent(0), half = cos.extent(2);
  const index_t samples = documents.extent(1) > 0 ? index_t(documents.extent(0)) : 1;
  if (index_t(cos.extent(0)) != samples || index_t(cos.extent(1)) != n || sin.extent(0) != cos.extent(0) ||
      sin.extent(1) != cos.extent(1) || sin.extent(2) != cos.extent(2))
    throw RuntimeFailure("rotary_table: cos and sin must be [" + std::to_string(samples) + ", " + std::to_string(n) +
                         ", Dh/2] (one row of samples with packed documents, else one)");
  const View1<double> inv_freq("rotary_inv_freq", half);
  const auto host_freq = Kokkos::create_mirror_view(inv_freq);
  for (index_t i = 0; i < half; ++i) host_freq(i) = std::pow(theta, -double(2 * i) / double(2 * half));
  Kokkos::deep_copy(inv_freq, host_freq);
  Kokkos::parallel_for(
      "miniattn::rotary_table", RowPolicy(0, samples * n * half), KOKKOS_LAMBDA(const index_t e) {
        const index_t i = e % half, row = e / half, s = row / n, p = positions(row % n);
        const index_t pos = documents.extent(1) > 0 ? p - document_start(documents, s, p) : p;
        const double angle = double(pos) * inv_freq(i);
        cos(s, row % n, i) = static_cast<A>(compat::cos(angle));
        sin(s, row % n, i) = static_cast<A>(compat::sin(angle));
      });
}

template <class T>
void rotate(const View4<T>& x, const View3<const Acc<T>>& cos, const View3<const Acc<T>>& sin, bool inverse) {
  using A = Acc<T>;
  const index_t batch = x.extent(0), heads = x.extent(1), n = x.extent(2), dh = x.extent(3), half = dh / 2;
  if (dh % 2 != 0 || index_t(cos.extent(1)) != n || index_t(cos.extent(2)) != half ||
      (cos.extent(0) != 1 && index_t(cos.extent(0)) != batch) || sin.extent(0) != cos.extent(0) ||
      sin.extent(1) != cos.extent(1) || sin.extent(2) != cos.extent(2))
    throw RuntimeFailure("rotate: x must be [B, H, n, Dh] (Dh even) and cos, sin [1 or B, n, Dh/2]");
  const bool per_sample = cos.extent(0) > 1;
  const A direction = inverse ? A(-1) : A(1);
  Kokkos::parallel_for(
      "miniattn::rotate", RowPolicy(0, batch * heads * n * half), KOKKOS_LAMBDA(const index_t e) {
        const index_t i = e % half, row = e / half, p = row % n, b = row / (n * heads), h = (row / n) % heads;
        const index_t s = per_sample ? b : 0;
        const A c = cos(s, p, i), sn = direction * sin(s, p, i);
        const A lo = widen(x(b, h, p, i)), hi = widen(x(b, h, p, i + half));
        x(b, h, p, i) = narrow<T>(lo * c - hi * sn);
        x(b, h, p, i + half) = narrow<T>(hi * c + lo * sn);
      });
}

template void rotary_table<float>(const View1<const index_t>&, const View2<const index_t>&, double, const View3<float>&,
                                  const View3<float>&);
template void rotary_table<double>(const View1<const index_t>&, const View2<const index_t>&, double,
                                   const View3<double>&, const View3<double>&);
template void rotate<float>(const View4<float>&, const View3<const float>&, const View3<const float>&, bool);
template void rotate<double>(const View4<double>&, const View3<const double>&, const View3<const double>&, bool);
template void rotate<bf16>(const View4<bf16>&, const View3<const float>&, const View3<const float>&, bool);

}  // namespace miniattn::kernels
