#include "kernels/layers/cross_entropy.hpp"

#include <sstream>
#include <stdexcept>

#include "core/kokkos_compat.hpp"
#include "kernels/base/reduction.hpp"

namespace miniattn::kernels {

using namespace simd;

namespace {

void check_shapes(const char* where, index_t rows, index_t vocab, const View1<const index_t>& targets,
                  index_t lse_rows) {
  std::ostringstream os;
  if (static_cast<index_t>(targets.extent(0)) != rows) {
    os << "targets has " << targets.extent(0) << " entries but logits has " << rows << " rows";
  } else if (lse_rows != rows) {
    os << "lse has " << lse_rows << " entries but logits has " << rows << " rows";
  } else if (rows > 0 && vocab == 0) {
    os << "logits has no columns";
  } else {
    return;
  }
  throw std::invalid_argument(std::string("kernels::") + where + ": " + os.str());
}

}  // namespace

// lse = m + log(sum_j exp(l_j - m)), m = max_j l_j. One team per row.
template <class T>
void cross_entropy_forward(const View2<const T>& logits, const View1<const index_t>& targets,
                           const View1<Acc<T>>& lse, const View1<double>& loss) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  const index_t vocab = static_cast<index_t>(logits.extent(1));
  check_shapes("cross_entropy_forward", rows, vocab, targets, static_cast<index_t>(lse.extent(0)));
  if (static_cast<index_t>(loss.extent(0)) != rows)
    throw std::invalid_argument("kernels::cross_entropy_forward: loss must be [rows]");
  if (rows == 0) return;

  using A = Acc<T>;
  using V = typename Pack<A>::type;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  index_t bad_targets = 0;
  Kokkos::parallel_reduce(
      "miniattn::cross_entropy_forward", row_team_policy(rows, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team, index_t& bad) {
        const index_t r = team_row(team);
        if (r >= rows) return;
        const T* const row = &logits(r, 0);
        const A m = team_vector_max<A>(team, vocab, [&](index_t c0, int w) { return load_n(row + c0, w); });
        const V vm = pack_splat<V>(m);
        const A sum = team_vector_sum<A>(team, vocab, [&](index_t c0, int w) {
          return kernel_exp<A>(V(load_n(row + c0, w) - vm));
        });
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          const A row_lse = m + compat::log(sum);
          const index_t t = targets(r);
          const bool valid = t >= 0 && t < vocab;
          lse(r) = row_lse;
          loss(r) = valid ? static_cast<double>(row_lse) - static_cast<double>(widen(row[t])) : 0.0;
          bad += valid ? 0 : 1;
        });
      },
      bad_targets);
  if (bad_targets != 0) {
    throw std::invalid_argument("kernels::cross_entropy_forward: " + std::to_string(bad_targets) +
                                " target(s) outside [0, " + std::to_string(vocab) + ")");
  }
}

// Every element reads only itself and its row's lse, so dlogits may alias logits.
template <class T>
void cross_entropy_backward(const View2<const T>& logits, const View1<const index_t>& targets,
                            const View1<const Acc<T>>& lse, Acc<T> scale, const View2<T>& dlogits) {
  const index_t rows = static_cast<index_t>(logits.extent(0));
  const index_t vocab = static_cast<index_t>(logits.extent(1));
  check_shapes("cross_entropy_backward", rows, vocab, targets, static_cast<index_t>(lse.extent(0)));
  if (dlogits.extent(0) != logits.extent(0) || dlogits.extent(1) != logits.extent(1)) {
    throw std::invalid_argument("kernels::cross_entropy_backward: dlogits must have the shape of logits");
  }
  using A = Acc<T>;
  using V = typename Pack<A>::type;
  row_packs<A>("miniattn::cross_entropy_backward", rows, vocab,
               KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                 const V p = kernel_exp<A>(V(load_n(&logits(r, c0), width) - pack_splat<V>(lse(r))));
                 V g = pack_splat<V>(scale) * p;
                 const index_t t = targets(r) - c0;  // the target's lane in this pack, if it is here
                 if (t >= 0 && t < width) {
                   A lanes[Pack<A>::lanes];
                   pack_store(lanes, g);
                   lanes[t] -= scale;
                   g = pack_load<V>(lanes);
                 }
                 store_n(&dlogits(r, c0), g, width);
               });
}

#define MINIATTN_INSTANTIATE_CROSS_ENTROPY(T)                                                                \
  template void cross_entropy_forward<T>(const View2<const T>&, const View1<const index_t>&,                \
                                         const View1<Acc<T>>&, const View1<double>&);                       \
  template void cross_entropy_backward<T>(const View2<const T>&, const View1<const index_t>&,               \
                                          const View1<const Acc<T>>&, Acc<T>, const View2<T>&);
MINIATTN_INSTANTIATE_CROSS_ENTROPY(float)
MINIATTN_INSTANTIATE_CROSS_ENTROPY(double)
MINIATTN_INSTANTIATE_CROSS_ENTROPY(bf16)
#undef MINIATTN_INSTANTIATE_CROSS_ENTROPY

}  // namespace miniattn::kernels
