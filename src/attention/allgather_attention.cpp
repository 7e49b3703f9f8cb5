#include "attention/allgather_attention.hpp"

#include <utility>

#include "attention/block_reach.hpp"

namespace miniattn {

template <class T>
AllGatherWorkspace<T>::AllGatherWorkspace(index_t batch, index_t heads, index_t kv_heads, index_t rows,
                                          index_t head_dim, int group_size, const kernels::AttentionBlocking& blocking)
    : row_sum("allgather.row_sum", batch, heads, rows), delta("allgather.delta", batch, heads, rows),
      kernel({batch, heads, kv_heads, head_dim, rows, rows}, blocking) {
  if (group_size < 2) return;
  const index_t elements = group_size * batch * kv_heads * rows * head_dim;
  k_all = View1<T>("allgather.k", elements);
  v_all = View1<T>("allgather.v", elements);
  dk_all = View1<T>("allgather.dk", elements);
  dv_all = View1<T>("allgather.dv", elements);
}

template <class T>
std::size_t AllGatherWorkspace<T>::bytes() const {
  return view_bytes(row_sum) + view_bytes(delta) + kernel.bytes() + view_bytes(k_all) + view_bytes(v_all) +
         view_bytes(dk_all) + view_bytes(dv_all);
}

template <class T>
AllGatherAttention<T>::AllGatherAttention(Comm& comm, MPI_Comm group, const View2<const index_t>& group_positions,
                                          const kernels::AttentionMask& mask,
                                          const kernels::AttentionBlocking& blocking,
                                          std::shared_ptr<AllGatherWorkspace<T>> workspace)
    : comm_(comm), group_(group), group_positions_(group_positions), mask_(mask), blocking_(blocking),
      workspace_(std::move(workspace)) {
  MPI_Comm_rank(group, &rank_);
  MPI_Comm_size(group, &size_);
  sees_ = rows_seen_from(group_positions, rank_, mask);
}

template <class T>
View1<const index_t> AllGatherAttention<T>::positions_of(int group_rank) const {
  return Kokkos::subview(group_positions_, group_rank, Kokkos::ALL());
}

template <class T>
template <class U>
View4<U> AllGatherAttention<T>::block(const View4<U>& own, const View1<T>& all, int g) const {
  if (size_ == 1) return own;
  return View4<U>(all.data() + static_cast<std::size_t>(g) * own.span(), own.extent(0), own.extent(1),
                  own.extent(2), own.extent(3));
}

template <class T>
void AllGatherAttention<T>::gather_keys_values(const View4<const T>& k, const View4<const T>& v,
                                               Exchange label) {
  if (size_ == 1) return;
  comm_.allgather(k.data(), workspace_->k_all.data(), k.span(), group_, label);
  comm_.allgather(v.data(), workspace_->v_all.data(), v.span(), group_, label);
}

template <class T>
void AllGatherAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                    const View4<T>& out, const View3<Acc<T>>& lse) {
  const View3<Acc<T>>& row_max = lse;  // lse doubles as the running maximum until finalize
  const View4<Acc<T>> out_acc = kernels::output_accumulator(out, workspace_->kernel);
  kernels::attention_forward_init<Acc<T>>(out_acc, row_max, workspace_->row_sum);
  gather_keys_values(k, v, Exchange::allgather_forward_kv);
  for (int g = 0; g < size_; ++g)
    if (sees_[static_cast<std::size_t>(g)])
      kernels::attention_forward_accumulate<T>(q, block(k, workspace_->k_all, g), block(v, workspace_->v_all, g),
                                               {positions_of(rank_), positions_of(g), mask_, blocking_}, out_acc,
                                               row_max, workspace_->row_sum, workspace_->kernel);
  kernels::attention_forward_finalize<T>(out_acc, row_max, workspace_->row_sum, lse, out);
}

// The forward's gathered K/V are not kept (their buffers serve every layer):
// the backward pass gathers them again, as Llama 3's context parallelism does.
template <class T>
void AllGatherAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                     const View4<const T>& out, const View3<const Acc<T>>& lse,
                                     const View4<const T>& dout, const View4<T>& dq, const View4<T>& dk,
                                     const View4<T>& dv) {
  AllGatherWorkspace<T>& w = *workspace_;
  kernels::attention_backward_delta<T>(out, dout, w.delta);
  const View4<Acc<T>> dq_acc = kernels::query_gradient_accumulator(dq, w.kernel);
  Kokkos::deep_copy(dq_acc, Acc<T>(0));
  gather_keys_values(k, v, Exchange::allgather_backward_kv);
  if (size_ == 1) {
    Kokkos::deep_copy(dk, T(0.0f));
    Kokkos::deep_copy(dv, T(0.0f));
  } else {
    Kokkos::deep_copy(w.dk_all, T(0.0f));
    Kokkos::deep_copy(w.dv_all, T(0.0f));
  }
  for (int g = 0; g < size_; ++g)
    if (sees_[static_cast<std::size_t>(g)])
      kernels::attention_backward_accumulate<T>(q, block(k, w.k_all, g), block(v, w.v_all, g), dout, lse, w.delta,
                                                {positions_of(rank_), positions_of(g), mask_, blocking_}, dq_acc,
                                                block(dk, w.dk_all, g), block(dv, w.dv_all, g), w.kernel);
  kernels::round_accumulator<T>(dq_acc, dq);
  if (size_ == 1) return;
  // Block g of every rank's dK, dV holds its queries' share for rank g's keys.
  comm_.reduce_scatter_sum(w.dk_all.data(), dk.data(), dk.span(), group_, Exchange::allgather_backward_dkdv);
  comm_.reduce_scatter_sum(w.dv_all.data(), dv.data(), dv.span(), group_, Exchange::allgather_backward_dkdv);
}

template struct AllGatherWorkspace<float>;
template struct AllGatherWorkspace<double>;
template struct AllGatherWorkspace<bf16>;
template class AllGatherAttention<float>;
template class AllGatherAttention<double>;
template class AllGatherAttention<bf16>;

}  // namespace miniattn
