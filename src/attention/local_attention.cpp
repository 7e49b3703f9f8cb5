#include "attention/local_attention.hpp"

namespace miniattn {

template <class T>
LocalAttention<T>::LocalAttention(const View1<const index_t>& positions, bool causal,
                                  const kernels::AttentionBlocking& blocking, index_t batch, index_t heads)
    : positions_(positions),
      causal_(causal),
      blocking_(blocking),
      row_sum_("attention.row_sum", batch, heads, positions.extent(0)),
      delta_("attention.delta", batch, heads, positions.extent(0)) {}

template <class T>
void LocalAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                const View4<T>& out, const View3<T>& lse) {
  kernels::attention_forward<T>(q, k, v, positions_, positions_, causal_, blocking_, out, lse, row_sum_);
}

template <class T>
void LocalAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                 const View4<const T>& out, const View3<const T>& lse, const View4<const T>& dout,
                                 const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) {
  kernels::attention_backward_delta<T>(out, dout, delta_);
  Kokkos::deep_copy(dq, T(0));
  Kokkos::deep_copy(dk, T(0));
  Kokkos::deep_copy(dv, T(0));
  kernels::attention_backward_accumulate<T>(q, k, v, dout, lse, delta_, positions_, positions_, causal_, blocking_,
                                            dq, dk, dv);
}

template class LocalAttention<float>;
template class LocalAttention<double>;

}  // namespace miniattn
