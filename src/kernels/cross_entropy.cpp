#include "kernels/cross_entropy.hpp"

#include "core/kokkos_compat.hpp"

#include <sstream>
#include <stdexcept>

namespace miniattn::kernels {

namespace cross_entropy_detail {

void check_targets(const char* where, index_t rows, index_t vocab, const View1<const index_t>& targets,
                   bool check_values) {
  std::ostringstream os;
  if (static_cast<index_t>(targets.extent(0)) != rows) {
    os << "targets has " << targets.extent(0) << " entries but logits has " << rows << " rows";
  } else if (rows > 0 && vocab == 0) {
    os << "logits has no columns";
  } else if (check_values) {
    index_t bad = 0;
    Kokkos::parallel_reduce(
        "miniattn::cross_entropy_check_targets", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, rows),
        KOKKOS_LAMBDA(const index_t r, index_t& acc) {
          const index_t t = targets(r);
          if (t < 0 || t >= vocab) acc += 1;
        },
        bad);
    if (bad == 0) return;
    os << bad << " target(s) outside [0, " << vocab << ")";
  } else {
    return;
  }
  throw std::invalid_argument(std::string("kernels::") + where + ": " + os.str());
}

}  // namespace cross_entropy_detail

// -log softmax(l)[t] = log(sum_j exp(l_j - m)) + m - l_t with m = max_j l_j.
// One team per row; the per-row losses are summed in double.
template <class T>
double cross_entropy_loss_sum(const View2<const T>& logits, const View1<const index_t>& targets) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  const index_t vocab = static_cast<index_t>(logits.extent(1));
  cross_entropy_detail::check_targets("cross_entropy_loss_sum", rows, vocab, targets, /*check_values=*/true);
  if (rows == 0) return 0.0;

  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  double total = 0.0;
  Kokkos::parallel_reduce(
      "miniattn::cross_entropy_loss_sum", Policy(static_cast<int>(rows), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const index_t r = team.league_rank();
        T row_max = logits(r, 0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](const index_t j, T& m) {
              const T v = logits(r, j);
              if (v > m) m = v;
            },
            Kokkos::Max<T>(row_max));
        T sum_exp = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](const index_t j, T& s) { s += compat::exp(logits(r, j) - row_max); }, sum_exp);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          acc += static_cast<double>(compat::log(sum_exp)) + static_cast<double>(row_max) -
                 static_cast<double>(logits(r, targets(r)));
        });
      },
      total);
  return total;
}

// dlogits[r] = scale * (softmax(logits[r]) - onehot(targets[r])). Every read of a
// row happens in the two team reductions, which finish (team barrier) before the
// row is written, and the write loop reads and writes the same element, so
// dlogits may alias logits.
template <class T>
void cross_entropy_backward(const View2<const T>& logits, const View1<const index_t>& targets, T scale,
                            const View2<T>& dlogits) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  const index_t vocab = static_cast<index_t>(logits.extent(1));
  if (dlogits.extent(0) != logits.extent(0) || dlogits.extent(1) != logits.extent(1)) {
    throw std::invalid_argument("kernels::cross_entropy_backward: dlogits must have the shape of logits");
  }
  // Target values were checked by the loss; an invalid one here only loses its
  // one-hot term (it is compared, never used as an index).
  cross_entropy_detail::check_targets("cross_entropy_backward", rows, vocab, targets, /*check_values=*/false);
  if (rows == 0) return;

  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "miniattn::cross_entropy_backward", Policy(static_cast<int>(rows), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t r = team.league_rank();
        const index_t t = targets(r);
        T row_max = logits(r, 0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](const index_t j, T& m) {
              const T v = logits(r, j);
              if (v > m) m = v;
            },
            Kokkos::Max<T>(row_max));
        T sum_exp = T(0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](const index_t j, T& s) { s += compat::exp(logits(r, j) - row_max); }, sum_exp);
        const T inv_sum = T(1) / sum_exp;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, vocab), [&](const index_t j) {
          const T p = compat::exp(logits(r, j) - row_max) * inv_sum;
          dlogits(r, j) = scale * (j == t ? p - T(1) : p);
        });
      });
}

template double cross_entropy_loss_sum<float>(const View2<const float>&, const View1<const index_t>&);
template double cross_entropy_loss_sum<double>(const View2<const double>&, const View1<const index_t>&);
template void cross_entropy_backward<float>(const View2<const float>&, const View1<const index_t>&, float,
                                            const View2<float>&);
template void cross_entropy_backward<double>(const View2<const double>&, const View1<const index_t>&, double,
                                             const View2<double>&);

}  // namespace miniattn::kernels
