#include "kernels/layer_norm.hpp"

#include "core/kokkos_compat.hpp"

#include <sstream>
#include <stdexcept>

namespace miniattn::kernels {

namespace {

void require_shape(bool ok, const char* where, const char* what) {
  if (!ok) {
    std::ostringstream os;
    os << "kernels::" << where << ": " << what;
    throw std::invalid_argument(os.str());
  }
}

}  // namespace

// One team per row: the team reduces the row's mean, then its (biased)
// variance about that mean (two passes: no cancellation), then writes y.
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

  const T eps = static_cast<T>(kLayerNormEps);
  const T inv_d = T(1) / static_cast<T>(d);
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "miniattn::layer_norm_forward", Policy(static_cast<int>(rows), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team.league_rank();
        T sum = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d), [&](const index_t j, T& acc) { acc += x(r, j); }, sum);
        const T mu = sum * inv_d;
        T sq = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d),
            [&](const index_t j, T& acc) {
              const T c = x(r, j) - mu;
              acc += c * c;
            },
            sq);
        const T rs = T(1) / compat::sqrt(sq * inv_d + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                             [&](const index_t j) { y(r, j) = (x(r, j) - mu) * rs * gamma(j) + beta(j); });
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
                         const View1<T>& dgamma, const View1<T>& dbeta) {
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

  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  const T inv_d = T(1) / static_cast<T>(d);

  // dx: one team per row.
  Kokkos::parallel_for(
      "miniattn::layer_norm_backward_dx", Policy(static_cast<int>(rows), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team.league_rank();
        const T mu = mean(r);
        const T rs = rstd(r);
        T sum_g = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d), [&](const index_t j, T& acc) { acc += dy(r, j) * gamma(j); }, sum_g);
        T sum_gx = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d),
            [&](const index_t j, T& acc) { acc += dy(r, j) * gamma(j) * (x(r, j) - mu) * rs; }, sum_gx);
        const T mean_g = sum_g * inv_d;
        const T mean_gx = sum_gx * inv_d;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const index_t j) {
          const T xhat = (x(r, j) - mu) * rs;
          dx(r, j) += rs * (dy(r, j) * gamma(j) - mean_g - xhat * mean_gx);
        });
      });

  // dgamma, dbeta: one team per column, rows reduced inside the team (race-free).
  Kokkos::parallel_for(
      "miniattn::layer_norm_backward_dgamma_dbeta", Policy(static_cast<int>(d), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t j = team.league_rank();
        T sum_dyx = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, rows),
            [&](const index_t r, T& acc) { acc += dy(r, j) * (x(r, j) - mean(r)) * rstd(r); }, sum_dyx);
        T sum_dy = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, rows), [&](const index_t r, T& acc) { acc += dy(r, j); }, sum_dy);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          dgamma(j) += sum_dyx;
          dbeta(j) += sum_dy;
        });
      });
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
                                         const View1<float>&);
template void layer_norm_backward<double>(const View2<const double>&, const View2<const double>&,
                                          const View1<const double>&, const View1<const double>&,
                                          const View1<const double>&, const View2<double>&, const View1<double>&,
                                          const View1<double>&);

}  // namespace miniattn::kernels
