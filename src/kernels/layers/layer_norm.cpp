#include "kernels/layers/layer_norm.hpp"

#include <type_traits>

#include "core/kokkos_compat.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/base/require_shape.hpp"

namespace miniattn::kernels {

using namespace simd;

// One team per row: the row's mean, then its (biased) variance about that mean
// (two passes: no cancellation), then y.
template <class T>
void layer_norm_forward(const View2<const T>& x, const View1<const T>& gamma, const View1<const T>& beta,
                        const View2<T>& y, const View1<Acc<T>>& mean, const View1<Acc<T>>& rstd) {
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

  using A = Acc<T>;
  using V = typename Pack<A>::type;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const A eps = static_cast<A>(kLayerNormEps);
  const A inv_d = A(1) / static_cast<A>(d);
  Kokkos::parallel_for(
      "miniattn::layer_norm_forward", row_team_policy(rows, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team_row(team);
        if (r >= rows) return;
        const T* const xr = &x(r, 0);
        const A mu = inv_d * team_vector_sum<A>(team, d, [&](index_t c0, int w) { return load_n(xr + c0, w); });
        const V vmu = pack_splat<V>(mu);
        const A var = inv_d * team_vector_sum<A>(team, d, [&](index_t c0, int w) {
                        const V c = load_n(xr + c0, w) - vmu;
                        return V(c * c);
                      });
        const A rs = A(1) / compat::sqrt(var + eps);
        const V vrs = pack_splat<V>(rs);
        team_vector_for<A>(team, d, [&](index_t c0, int w) {
          const V xhat = (load_n(xr + c0, w) - vmu) * vrs;
          store_n(&y(r, c0), V(xhat * load_n(&gamma(c0), w) + load_n(&beta(c0), w)), w);
        });
        Kokkos::single(Kokkos::PerThread(team), [&]() {
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
                         const View1<const Acc<T>>& mean, const View1<const Acc<T>>& rstd, const View2<T>& dx,
                         const View1<Param<T>>& dgamma, const View1<Param<T>>& dbeta,
                         const View2<Acc<T>>& partials) {
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

  using A = Acc<T>;
  using V = typename Pack<A>::type;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const A inv_d = A(1) / static_cast<A>(d);
  Kokkos::parallel_for(
      "miniattn::layer_norm_backward_dx", row_team_policy(rows, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team_row(team);
        if (r >= rows) return;
        const T* const xr = &x(r, 0);
        const T* const dyr = &dy(r, 0);
        const V vmu = pack_splat<V>(mean(r)), vrs = pack_splat<V>(rstd(r));
        const A mean_g = inv_d * team_vector_sum<A>(team, d, [&](index_t c0, int w) {
                           return V(load_n(dyr + c0, w) * load_n(&gamma(c0), w));
                         });
        const A mean_gx = inv_d * team_vector_sum<A>(team, d, [&](index_t c0, int w) {
                            const V xhat = (load_n(xr + c0, w) - vmu) * vrs;
                            return V(load_n(dyr + c0, w) * load_n(&gamma(c0), w) * xhat);
                          });
        const V vmean_g = pack_splat<V>(mean_g), vmean_gx = pack_splat<V>(mean_gx);
        team_vector_for<A>(team, d, [&](index_t c0, int w) {
          const V xhat = (load_n(xr + c0, w) - vmu) * vrs;
          const V g = load_n(dyr + c0, w) * load_n(&gamma(c0), w);
          store_n(&dx(r, c0), V(load_n(&dx(r, c0), w) + vrs * (g - vmean_g - xhat * vmean_gx)), w);
        });
      });

  // The parameters' gradients: fp32 (Param<T>) sums of Acc<T> terms.
  static_assert(std::is_same<Acc<T>, Param<T>>::value, "column sums add Acc<T> terms into Param<T> gradients");
  add_column_sums<A>(
      "miniattn::layer_norm_backward_dgamma", rows, d, partials,
      KOKKOS_LAMBDA(const index_t r, const index_t c0, const int w) {
        const V xhat = (load_n(&x(r, c0), w) - pack_splat<V>(mean(r))) * pack_splat<V>(rstd(r));
        return V(load_n(&dy(r, c0), w) * xhat);
      },
      dgamma);
  add_column_sums<A>(
      "miniattn::layer_norm_backward_dbeta", rows, d, partials,
      KOKKOS_LAMBDA(const index_t r, const index_t c0, const int w) { return load_n(&dy(r, c0), w); }, dbeta);
}

#define MINIATTN_INSTANTIATE_LAYER_NORM(T)                                                                        \
  template void layer_norm_forward<T>(const View2<const T>&, const View1<const T>&, const View1<const T>&,          \
                                      const View2<T>&, const View1<Acc<T>>&, const View1<Acc<T>>&);                 \
  template void layer_norm_backward<T>(const View2<const T>&, const View2<const T>&, const View1<const T>&,         \
                                       const View1<const Acc<T>>&, const View1<const Acc<T>>&, const View2<T>&,     \
                                       const View1<Param<T>>&, const View1<Param<T>>&, const View2<Acc<T>>&);
MINIATTN_INSTANTIATE_LAYER_NORM(float)
MINIATTN_INSTANTIATE_LAYER_NORM(double)
MINIATTN_INSTANTIATE_LAYER_NORM(bf16)
#undef MINIATTN_INSTANTIATE_LAYER_NORM

}  // namespace miniattn::kernels
