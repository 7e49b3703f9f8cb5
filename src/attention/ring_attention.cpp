#include "attention/ring_attention.hpp"

#include <utility>

namespace miniattn {

template <class T>
RingAttention<T>::RingAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions, bool causal,
                                const kernels::AttentionBlocking& blocking, index_t batch, index_t heads,
                                index_t head_dim, std::string name)
    : comm_(comm), ring_(ring), ring_positions_(ring_positions), causal_(causal), blocking_(blocking),
      name_(std::move(name)) {
  MPI_Comm_rank(ring, &rank_);
  MPI_Comm_size(ring, &size_);
  const index_t m = static_cast<index_t>(ring_positions.extent(1));
  row_sum_ = View3<T>("ring.row_sum", batch, heads, m);
  delta_ = View3<T>("ring.delta", batch, heads, m);
  if (size_ > 1) {
    for (int i = 0; i < 2; ++i) {
      k_buffer_[i] = View4<T>("ring.k_buffer", batch, heads, m, head_dim);
      v_buffer_[i] = View4<T>("ring.v_buffer", batch, heads, m, head_dim);
      dk_buffer_[i] = View4<T>("ring.dk_buffer", batch, heads, m, head_dim);
      dv_buffer_[i] = View4<T>("ring.dv_buffer", batch, heads, m, head_dim);
    }
  }
}

template <class T>
View1<const index_t> RingAttention<T>::positions_of(int ring_rank) const {
  return Kokkos::subview(ring_positions_, ring_rank, Kokkos::ALL());
}

template <class T>
void RingAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                               const View4<T>& out, const View3<T>& lse) {
  const View3<T>& row_max = lse;  // lse doubles as the running maximum until finalize
  kernels::attention_forward_init<T>(out, row_max, row_sum_);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  View4<const T> k_current = k, v_current = v;
  for (int step = 0; step < size_; ++step) {
    PendingExchange pending;
    const int slot = step % 2;
    if (step + 1 < size_) {  // the block for the next step travels while this one computes
      comm_.post_shift(k_current.data(), k_buffer_[slot].data(), k_current.span(), next, prev, ring_,
                       "ring.forward.kv", pending);
      comm_.post_shift(v_current.data(), v_buffer_[slot].data(), v_current.span(), next, prev, ring_,
                       "ring.forward.kv", pending);
    }
    const int source = (rank_ - step + size_) % size_;
    kernels::attention_forward_accumulate<T>(q, k_current, v_current, positions_of(rank_), positions_of(source),
                                             causal_, blocking_, out, row_max, row_sum_);
    comm_.wait(pending);
    if (step + 1 < size_) {
      k_current = k_buffer_[slot];
      v_current = v_buffer_[slot];
    }
  }
  kernels::attention_forward_finalize<T>(out, row_max, row_sum_, lse);
}

template <class T>
void RingAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                const View4<const T>& out, const View3<const T>& lse, const View4<const T>& dout,
                                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) {
  kernels::attention_backward_delta<T>(out, dout, delta_);
  Kokkos::deep_copy(dq, T(0));
  if (size_ == 1) {
    Kokkos::deep_copy(dk, T(0));
    Kokkos::deep_copy(dv, T(0));
    kernels::attention_backward_accumulate<T>(q, k, v, dout, lse, delta_, positions_of(0), positions_of(0), causal_,
                                              blocking_, dq, dk, dv);
    return;
  }
  // Block b starts on rank b with zero accumulators, visits every rank, each
  // adding its queries' contribution, and comes home after `size_` hops.
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  View4<const T> k_current = k, v_current = v;
  View4<T> dk_current = dk_buffer_[1], dv_current = dv_buffer_[1];
  Kokkos::deep_copy(dk_current, T(0));
  Kokkos::deep_copy(dv_current, T(0));
  for (int step = 0; step < size_; ++step) {
    const int slot = step % 2;
    PendingExchange kv_pending, grad_pending;
    if (step + 1 < size_) {
      comm_.post_shift(k_current.data(), k_buffer_[slot].data(), k_current.span(), next, prev, ring_,
                       "ring.backward.kv", kv_pending);
      comm_.post_shift(v_current.data(), v_buffer_[slot].data(), v_current.span(), next, prev, ring_,
                       "ring.backward.kv", kv_pending);
    }
    const int source = (rank_ - step + size_) % size_;
    kernels::attention_backward_accumulate<T>(q, k_current, v_current, dout, lse, delta_, positions_of(rank_),
                                              positions_of(source), causal_, blocking_, dq, dk_current, dv_current);
    // The accumulators move on (on the last step: home to their block's owner).
    const View4<T>& dk_next = step + 1 < size_ ? dk_buffer_[slot] : dk;
    const View4<T>& dv_next = step + 1 < size_ ? dv_buffer_[slot] : dv;
    comm_.post_shift(dk_current.data(), dk_next.data(), dk_current.span(), next, prev, ring_, "ring.backward.dkdv",
                     grad_pending);
    comm_.post_shift(dv_current.data(), dv_next.data(), dv_current.span(), next, prev, ring_, "ring.backward.dkdv",
                     grad_pending);
    comm_.wait(kv_pending);
    comm_.wait(grad_pending);
    k_current = k_buffer_[slot];
    v_current = v_buffer_[slot];
    dk_current = dk_next;
    dv_current = dv_next;
  }
}

template <class T>
std::size_t RingAttention<T>::allocated_bytes() const {
  std::size_t bytes = view_bytes(row_sum_) + view_bytes(delta_);
  for (int i = 0; i < 2; ++i)
    bytes += view_bytes(k_buffer_[i]) + view_bytes(v_buffer_[i]) + view_bytes(dk_buffer_[i]) + view_bytes(dv_buffer_[i]);
  return bytes;
}

template class RingAttention<float>;
template class RingAttention<double>;

}  // namespace miniattn
