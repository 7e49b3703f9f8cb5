#include "attention/ring_attention.hpp"

#include <utility>

#include "attention/block_reach.hpp"
#include "attention/ring_backward_pass.hpp"

namespace miniattn {

template <class T>
RingWorkspace<T>::RingWorkspace(index_t batch, index_t heads, index_t kv_heads, index_t rows, index_t head_dim,
                                int ring_size, const kernels::AttentionBlocking& blocking)
    : row_sum("ring.row_sum", batch, heads, rows), delta("ring.delta", batch, heads, rows),
      kernel({batch, heads, kv_heads, head_dim, rows, rows}, blocking) {
  if (ring_size < 2) return;
  for (int i = 0; i < 2; ++i) {
    k[i] = View4<T>("ring.k_buffer", batch, kv_heads, rows, head_dim);
    v[i] = View4<T>("ring.v_buffer", batch, kv_heads, rows, head_dim);
    dk[i] = View4<T>("ring.dk_buffer", batch, kv_heads, rows, head_dim);
    dv[i] = View4<T>("ring.dv_buffer", batch, kv_heads, rows, head_dim);
  }
}

template <class T>
std::size_t RingWorkspace<T>::bytes() const {
  std::size_t total = view_bytes(row_sum) + view_bytes(delta) + kernel.bytes();
  for (int i = 0; i < 2; ++i) total += view_bytes(k[i]) + view_bytes(v[i]) + view_bytes(dk[i]) + view_bytes(dv[i]);
  return total;
}

template <class T>
RingAttention<T>::RingAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions,
                                const kernels::AttentionMask& mask, int steps,
                                const kernels::AttentionBlocking& blocking, std::shared_ptr<RingWorkspace<T>> workspace,
                                std::string name)
    : comm_(comm), ring_(ring), steps_(steps), ring_positions_(ring_positions), mask_(mask), blocking_(blocking),
      name_(std::move(name)), workspace_(std::move(workspace)) {
  MPI_Comm_rank(ring, &rank_);
  MPI_Comm_size(ring, &size_);
  sees_ = rows_seen_from(ring_positions, rank_, mask);
}

template <class T>
View1<const index_t> RingAttention<T>::positions_of(int ring_rank) const {
  return Kokkos::subview(ring_positions_, ring_rank, Kokkos::ALL());
}

template <class T>
void RingAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                               const View4<T>& out, const View3<Acc<T>>& lse) {
  const View3<Acc<T>>& row_max = lse;  // lse doubles as the running maximum until finalize
  const View4<Acc<T>> out_acc = kernels::output_accumulator(out, workspace_->kernel);
  kernels::attention_forward_init<Acc<T>>(out_acc, row_max, workspace_->row_sum);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  View4<const T> k_current = k, v_current = v;
  for (int step = 0; step < steps_; ++step) {
    PendingExchange pending;
    const int slot = step % 2;
    if (step + 1 < steps_) {  // the block for the next step travels while this one computes
      comm_.post_shift(k_current.data(), workspace_->k[slot].data(), k_current.span(), next, prev, ring_,
                       Exchange::ring_forward_kv, pending);
      comm_.post_shift(v_current.data(), workspace_->v[slot].data(), v_current.span(), next, prev, ring_,
                       Exchange::ring_forward_kv, pending);
    }
    const int source = (rank_ - step + size_) % size_;
    if (sees_[static_cast<std::size_t>(source)])
      kernels::attention_forward_accumulate<T>(q, k_current, v_current,
                                               {positions_of(rank_), positions_of(source), mask_, blocking_}, out_acc,
                                               row_max, workspace_->row_sum, workspace_->kernel);
    comm_.wait(pending);
    if (step + 1 < steps_) {
      k_current = workspace_->k[slot];
      v_current = workspace_->v[slot];
    }
  }
  kernels::attention_forward_finalize<T>(out_acc, row_max, workspace_->row_sum, lse, out);
}

template <class T>
void RingAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                const View4<const T>& out, const View3<const Acc<T>>& lse, const View4<const T>& dout,
                                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) {
  kernels::attention_backward_delta<T>(out, dout, workspace_->delta);
  const View4<Acc<T>> dq_acc = kernels::query_gradient_accumulator(dq, workspace_->kernel);
  Kokkos::deep_copy(dq_acc, Acc<T>(0));
  const RingBackwardBuffers<T> buffers{workspace_->k, workspace_->v, workspace_->dk, workspace_->dv};
  ring_backward_pass<T>(comm_, ring_, rank_, size_, steps_, k, v, dk, dv, buffers,
                        {Exchange::ring_backward_kv, Exchange::ring_backward_dkdv},
                        [&](int source, const View4<const T>& k_block, const View4<const T>& v_block,
                            const View4<T>& dk_block, const View4<T>& dv_block) {
                          if (!sees_[static_cast<std::size_t>(source)]) return;
                          kernels::attention_backward_accumulate<T>(
                              q, k_block, v_block, dout, lse, workspace_->delta,
                              {positions_of(rank_), positions_of(source), mask_, blocking_}, dq_acc, dk_block, dv_block,
                              workspace_->kernel);
                        });
  kernels::round_accumulator<T>(dq_acc, dq);
}

template struct RingWorkspace<float>;
template struct RingWorkspace<double>;
template struct RingWorkspace<bf16>;
template class RingAttention<float>;
template class RingAttention<double>;
template class RingAttention<bf16>;

}  // namespace miniattn
