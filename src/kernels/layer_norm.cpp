#include "kernels/layer_norm.hpp"

#include <sstream>
#include <stdexcept>

#include "core/kokkos_compat.hpp"
#include "kernels/reduction.hpp"

namespace miniattn::kernels {

using namespace simd;

namespace {

void require_shape(bool ok, const char* where, const char* what) {
  if (!ok) {
    std::ostringstream os;
    os << "kernels::" << where << ": " << what;
    throw std::invalid_argument(os.str());
  }
}

}  // namespace

// One team per row: the row's mean, then its (biased) variance about that mean
// (two passes: no cancellation), then y.
template <class T>
void layer_norm_forward(const View2<const T>& x, const View1<const T>& gamma, const View1<const T>& beta,
                        const View2<T>& y, const View1<T>& mean, const View1<T>& rstd) {
  const index_t rows = static_cast<index_t>(x.extent(0));
  const index_t d = static_cast<index_t>(x.extent(1));
  require_shape(d > 0, "layer_norm_forward", "x must have at least one column");
  require_shape(static_cast<index_t>(gamma.extent(0)) == d && static_cast<index_t>(beta.extent(0)) == d,
                "layer_norm_forward", "gamma and beta must be [D]");
  require_shape(y.extent(0) == x.extent(0) && y.extent(1) == x.extent(1), "layer_norm_forward",
                "y must have the shape of x");
  require_shape(static_cast<index_t>(mean.extent(0)) == rows && static_cast<index_t>(rstd.extent(0)) == rows,
                "layer_norm_forward", "mean and rstd must be [rows]");
  if (rows == 0) return;

  using V = typename Pack<T>::type;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const T eps = static_cast<T>(kLayerNormEps);
  const T inv_d = T(1) / static_cast<T>(d);
  Kokkos::parallel_for(
      "miniattn::layer_norm_forward", row_team_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team.league_rank();
        const T* const xr = &x(r, 0);
        const T mu = inv_d * team_vector_sum<T>(team, d, [&](index_t c0, int w) { return pack_load_n<V>(xr + c0, w); });
        const V vmu = pack_splat<V>(mu);
        const T var = inv_d * team_vector_sum<T>(team, d, [&](index_t c0, int w) {
                        const V c = pack_load_n<V>(xr + c0, w) - vmu;
                        return V(c * c);
                      });
        const T rs = T(1) / compat::sqrt(var + eps);
        const V vrs = pack_splat<V>(rs);
        team_vector_for<T>(team, d, [&](index_t c0, int w) {
          const V xhat = (pack_load_n<V>(xr + c0, w) - vmu) * vrs;
          pack_store_n(&y(r, c0), V(xhat * pack_load_n<V>(&gamma(c0), w) + pack_load_n<V>(&beta(c0), w)), w);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(r) = mu;
          rstd(r) = rs;
        });
      });
}

// With xhat = (x - mean) rstd and g = dy * gamma:
//   dx     += rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dgamma += sum_rows dy * xhat,   dbeta += sum_rows dy.
template <class T>
void layer_norm_backward(const View2<const T>& dy, const View2<const T>& x, const View1<const T>& gamma,
                         const View1<const T>& mean, const View1<const T>& rstd, const View2<T>& dx,
                         const View1<T>& dgamma, const View1<T>& dbeta, const View2<T>& partials) {
  const index_t rows = static_cast<index_t>(x.extent(0));
  const index_t d = static_cast<index_t>(x.extent(1));
  require_shape(dy.extent(0) == x.extent(0) && dy.extent(1) == x.extent(1), "layer_norm_backward",
                "dy must have the shape of x");
  require_shape(dx.extent(0) == x.extent(0) && dx.extent(1) == x.extent(1), "layer_norm_backward",
                "dx must have the shape of x");
  require_shape(static_cast<index_t>(gamma.extent(0)) == d && static_cast<index_t>(dgamma.extent(0)) == d &&
                    static_cast<index_t>(dbeta.extent(0)) == d,
                "layer_norm_backward", "gamma, dgamma and dbeta must be [D]");
  require_shape(static_cast<index_t>(mean.extent(0)) == rows && static_cast<index_t>(rstd.extent(0)) == rows,
                "layer_norm_backward", "mean and rstd must be [rows]");
  if (rows == 0 || d == 0) return;

  using V = typename Pack<T>::type;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const T inv_d = T(1) / static_cast<T>(d);
  Kokkos::parallel_for(
      "miniattn::layer_norm_backward_dx", row_team_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team.league_rank();
        const T* const xr = &x(r, 0);
        const T* const dyr = &dy(r, 0);
        const V vmu = pack_splat<V>(mean(r)), vrs = pack_splat<V>(rstd(r));
        const T mean_g = inv_d * team_vector_sum<T>(team, d, [&](index_t c0, int w) {
                           return V(pack_load_n<V>(dyr + c0, w) * pack_load_n<V>(&gamma(c0), w));
                         });
        const T mean_gx = inv_d * team_vector_sum<T>(team, d, [&](index_t c0, int w) {
                            const V xhat = (pack_load_n<V>(xr + c0, w) - vmu) * vrs;
                            return V(pack_load_n<V>(dyr + c0, w) * pack_load_n<V>(&gamma(c0), w) * xhat);
                          });
        const V vmean_g = pack_splat<V>(mean_g), vmean_gx = pack_splat<V>(mean_gx);
        team_vector_for<T>(team, d, [&](index_t c0, int w) {
          const V xhat = (pack_load_n<V>(xr + c0, w) - vmu) * vrs;
          const V g = pack_load_n<V>(dyr + c0, w) * pack_load_n<V>(&gamma(c0), w);
          pack_store_n(&dx(r, c0), V(pack_load_n<V>(&dx(r, c0), w) + vrs * (g - vmean_g - xhat * vmean_gx)), w);
        });
      });

  add_column_sums<T>(
      "miniattn::layer_norm_backward_dgamma", rows, d, partials,
      KOKKOS_LAMBDA(const index_t r, const index_t c0, const int w) {
        const V xhat = (pack_load_n<V>(&x(r, c0), w) - pack_splat<V>(mean(r))) * pack_splat<V>(rstd(r));
        return V(pack_load_n<V>(&dy(r, c0), w) * xhat);
      },
      dgamma);
  add_column_sums<T>(
      "miniattn::layer_norm_backward_dbeta", rows, d, partials,
      KOKKOS_LAMBDA(const index_t r, const index_t c0, const int w) { return pack_load_n<V>(&dy(r, c0), w); },
      dbeta);
}

template void layer_norm_forward<float>(const View2<const float>&, const View1<const float>&,
                                        const View1<const float>&, const View2<float>&, const View1<float>&,
                                        const View1<float>&);
template void layer_norm_forward<double>(const View2<const double>&, const View1<const double>&,
                                         const View1<const double>&, const View2<double>&, const View1<double>&,
                                         const View1<double>&);
template void layer_norm_backward<float>(const View2<const float>&, const View2<const float>&,
                                         const View1<const float>&, const View1<const float>&,
                                         const View1<const float>&, const View2<float>&, const View1<float>&,
                                         const View1<float>&, const View2<float>&);
template void layer_norm_backward<double>(const View2<const double>&, const View2<const double>&,
                                          const View1<const double>&, const View1<const double>&,
                                          const View1<const double>&, const View2<double>&, const View1<double>&,
                                          const View1<double>&, const View2<double>&);

}  // namespace miniattn::kernels
