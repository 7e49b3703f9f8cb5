#include "kernels/dense_attention.hpp"

#include <limits>

#include "core/kokkos_compat.hpp"

namespace miniattn::kernels {

namespace {
using Range = Kokkos::RangePolicy<ExecSpace>;

// dS of one stored probability P (query i of head h, key j of K/V head hk):
// P (dP - delta) / sqrt(Dh) with dP = dout_i . v_j; 0 where P is (masked).
template <class T>
struct ScoreGradient {
  View4<const T> probabilities, v, dout;
  View3<const T> delta;
  T scale;
  KOKKOS_INLINE_FUNCTION T operator()(index_t b, index_t h, index_t hk, index_t i, index_t j) const {
    const T p = probabilities(b, h, i, j);
    if (p == T(0)) return T(0);
    T dp = 0;
    for (index_t d = 0; d < static_cast<index_t>(v.extent(3)); ++d) dp += dout(b, h, i, d) * v(b, hk, j, d);
    return p * (dp - delta(b, h, i)) * scale;
  }
};
}  // namespace

template <class T>
void score_block(const View4<const T>& q, const View4<const T>& k, const View1<const index_t>& q_pos,
                 const View1<const index_t>& k_pos, const AttentionMask& mask, const View4<T>& scores) {
  const index_t B = q.extent(0), H = q.extent(1), n = q.extent(2), Dh = q.extent(3), nk = k.extent(2);
  const index_t group = H / k.extent(1);
  const T scale = T(1) / compat::sqrt(static_cast<T>(Dh));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  Kokkos::parallel_for(
      "miniattn::score_block", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H), hk = h / group;
        for (index_t j = 0; j < nk; ++j) {
          if (mask.hides(b, q_pos(i), k_pos(j))) {
            scores(b, h, i, j) = minus_inf;
            continue;
          }
          T dot = 0;
          for (index_t d = 0; d < Dh; ++d) dot += q(b, h, i, d) * k(b, hk, j, d);
          scores(b, h, i, j) = scale * dot;
        }
      });
}

template <class T>
void softmax_over_blocks(const View5<T>& scores, const View3<T>& lse) {
  const index_t G = scores.extent(0), B = scores.extent(1), H = scores.extent(2), n = scores.extent(3),
                nk = scores.extent(4);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  Kokkos::parallel_for(
      "miniattn::softmax_over_blocks", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H);
        T row_max = minus_inf;
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j) row_max = scores(g, b, h, i, j) > row_max ? scores(g, b, h, i, j) : row_max;
        T sum = 0;
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j) {
            const T p = scores(g, b, h, i, j) == minus_inf ? T(0) : compat::exp(scores(g, b, h, i, j) - row_max);
            scores(g, b, h, i, j) = p;
            sum += p;
          }
        for (index_t g = 0; g < G; ++g)
          for (index_t j = 0; j < nk; ++j) scores(g, b, h, i, j) /= sum;
        lse(b, h, i) = row_max + compat::log(sum);
      });
}

template <class T>
void apply_probabilities(const View4<const T>& probabilities, const View4<const T>& v, const View4<T>& out) {
  const index_t B = out.extent(0), H = out.extent(1), n = out.extent(2), Dh = out.extent(3), nk = v.extent(2);
  const index_t group = H / v.extent(1);
  Kokkos::parallel_for(
      "miniattn::apply_probabilities", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H), hk = h / group;
        for (index_t j = 0; j < nk; ++j) {
          const T p = probabilities(b, h, i, j);
          if (p == T(0)) continue;
          for (index_t d = 0; d < Dh; ++d) out(b, h, i, d) += p * v(b, hk, j, d);
        }
      });
}

template <class T>
void dense_block_backward(const View4<const T>& probabilities, const View4<const T>& q, const View4<const T>& k,
                          const View4<const T>& v, const View4<const T>& dout, const View3<const T>& delta,
                          const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) {
  const index_t B = q.extent(0), H = q.extent(1), n = q.extent(2), Dh = q.extent(3), nk = k.extent(2);
  const index_t KV = k.extent(1), group = H / KV;
  const ScoreGradient<T> score_gradient{probabilities, v, dout, delta, T(1) / compat::sqrt(static_cast<T>(Dh))};
  // Query rows: dq. Parallel over (b, h, i); each thread owns its dq row.
  Kokkos::parallel_for(
      "miniattn::dense_block_backward_dq", Range(0, B * H * n), KOKKOS_LAMBDA(const index_t r) {
        const index_t i = r % n, h = (r / n) % H, b = r / (n * H), hk = h / group;
        for (index_t j = 0; j < nk; ++j) {
          const T ds = score_gradient(b, h, hk, i, j);
          if (ds == T(0)) continue;
          for (index_t d = 0; d < Dh; ++d) dq(b, h, i, d) += ds * k(b, hk, j, d);
        }
      });
  // Key rows: dk, dv. Parallel over (b, K/V head, j); each thread owns its dk,
  // dv rows and sums over its group's query heads in a fixed order (no atomics).
  Kokkos::parallel_for(
      "miniattn::dense_block_backward_dkdv", Range(0, B * KV * nk), KOKKOS_LAMBDA(const index_t r) {
        const index_t j = r % nk, hk = (r / nk) % KV, b = r / (nk * KV);
        for (index_t h = hk * group; h < (hk + 1) * group; ++h)
          for (index_t i = 0; i < n; ++i) {
            const T p = probabilities(b, h, i, j);
            if (p == T(0)) continue;
            const T ds = score_gradient(b, h, hk, i, j);
            for (index_t d = 0; d < Dh; ++d) {
              dk(b, hk, j, d) += ds * q(b, h, i, d);
              dv(b, hk, j, d) += p * dout(b, h, i, d);
            }
          }
      });
}

#define MINIATTN_INSTANTIATE(T)                                                                              \
  template void score_block<T>(const View4<const T>&, const View4<const T>&, const View1<const index_t>&,    \
                               const View1<const index_t>&, const AttentionMask&, const View4<T>&);          \
  template void softmax_over_blocks<T>(const View5<T>&, const View3<T>&);                                    \
  template void apply_probabilities<T>(const View4<const T>&, const View4<const T>&, const View4<T>&);       \
  template void dense_block_backward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&, \
                                        const View4<const T>&, const View4<const T>&, const View3<const T>&, \
                                        const View4<T>&, const View4<T>&, const View4<T>&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::kernels
