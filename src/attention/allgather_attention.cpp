#include "attention/allgather_attention.hpp"

#include <utility>

#include "attention/block_reach.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"

namespace miniattn {

namespace {

template <class T>
LayerMaker<T> make_allgather_layers(const AttentionBuild& build, std::size_t& shared_bytes) {
  auto workspace = std::make_shared<AllGatherWorkspace<T>>(build.sizes);
  shared_bytes += workspace->bytes();
  return [build, workspace](const kernels::AttentionMask& mask) -> std::unique_ptr<AttentionStrategy<T>> {
    return std::make_unique<AllGatherAttention<T>>(build.comm, build.grid.ring_comm, build.positions, mask,
                                                   build.sizes.blocking, workspace);
  };
}

kernels::AttentionShape own_block(const AttentionSizes& z) {
  return {z.batch, z.heads, z.kv_heads, z.head_dim, z.rows, z.rows};
}

// All shared: row statistics, the kernels' scratch for one block, and (sp > 1)
// the whole sequence's K, V, dK, dV: O(N) per rank.
AttentionMemory allgather_memory(const AttentionSizes& z) {
  const std::size_t s = z.value_bytes, a = z.acc_bytes, G = static_cast<std::size_t>(z.sp);
  const std::size_t R = static_cast<std::size_t>(z.batch * z.rows), H = static_cast<std::size_t>(z.heads);
  const std::size_t Dk = static_cast<std::size_t>(z.kv_heads * z.head_dim);
  AttentionMemory memory;
  memory.shared = 2 * R * H * a + kernels::attention_workspace_bytes(own_block(z), z.blocking, s, a) +
                  (G > 1 ? 4 * G * R * Dk * s : 0);
  memory.cudnn_workspace = kernels::cudnn_workspace_bytes(own_block(z), z.blocking);
  return memory;
}

// Per layer over P ranks: K and V gathered in the forward pass and again in
// the backward pass, dK and dV reduce-scattered.
void add_allgather_exchanges(const AttentionSizes& z, double layers, std::map<Exchange, double>& bytes) {
  const double P = z.sp, L = layers;
  if (P <= 1) return;
  const double X_kv = z.block_bytes(z.kv_heads);
  bytes[Exchange::allgather_forward_kv] = L * 2 * (P - 1) * X_kv;
  bytes[Exchange::allgather_backward_kv] = L * 2 * (P - 1) * X_kv;
  bytes[Exchange::allgather_backward_dkdv] = L * 2 * (P - 1) * X_kv;
}

}  // namespace

const StrategyRecord& allgather_attention_record() {
  static const StrategyRecord record{
      Strategy::allgather,
      /*splits_sequence=*/true,
      UlyssesDegree::none,
      /*takes_attention_kernel=*/true,
      KeyValueRoute::gathered,
      {Exchange::allgather_forward_kv, Exchange::allgather_backward_kv, Exchange::allgather_backward_dkdv},
      allgather_memory,
      add_allgather_exchanges,
      make_allgather_layers<float>,
      make_allgather_layers<double>,
      make_allgather_layers<bf16>};
  return record;
}

template <class T>
AllGatherWorkspace<T>::AllGatherWorkspace(const AttentionSizes& sizes)
    : row_sum("allgather.row_sum", sizes.batch, sizes.heads, sizes.rows),
      delta("allgather.delta", sizes.batch, sizes.heads, sizes.rows), kernel(own_block(sizes), sizes.blocking) {
  if (sizes.sp < 2) return;
  const index_t elements = sizes.sp * sizes.batch * sizes.kv_heads * sizes.rows * sizes.head_dim;
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
kernels::AttentionScope AllGatherAttention<T>::scope(int source, const DocumentIds& documents) const {
  const auto row = [&](int r) { return Kokkos::subview(group_positions_, r, Kokkos::ALL()); };
  return {row(rank_), row(source), mask_.with_documents(documents), blocking_};
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
                                    const DocumentIds& documents, const View4<T>& out, const View3<Acc<T>>& lse) {
  const View3<Acc<T>>& row_max = lse;  // lse doubles as the running maximum until finalize
  const View4<Acc<T>> out_acc = kernels::accumulator_of(out, workspace_->kernel);
  kernels::attention_forward_init<Acc<T>>(out_acc, row_max, workspace_->row_sum);
  gather_keys_values(k, v, Exchange::allgather_forward_kv);
  for (int g = 0; g < size_; ++g)
    if (sees_[static_cast<std::size_t>(g)])
      kernels::attention_forward_accumulate<T>(q, block(k, workspace_->k_all, g), block(v, workspace_->v_all, g),
                                               scope(g, documents), out_acc, row_max, workspace_->row_sum,
                                               workspace_->kernel);
  kernels::attention_forward_finalize<T>(out_acc, row_max, workspace_->row_sum, lse, out);
}

// The forward's gathered K/V are not kept (their buffers serve every layer):
// the backward pass gathers them again, as Llama 3's context parallelism does.
template <class T>
void AllGatherAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                     const DocumentIds& documents, const View4<const T>& out,
                                     const View3<const Acc<T>>& lse, const View4<const T>& dout, const View4<T>& dq,
                                     const View4<T>& dk, const View4<T>& dv) {
  AllGatherWorkspace<T>& w = *workspace_;
  kernels::attention_backward_delta<T>(out, dout, w.delta);
  const View4<Acc<T>> dq_acc = kernels::accumulator_of(dq, w.kernel);
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
      kernels::attention_backward_accumulate<T>(q, block(k, w.k_all, g), block(v, w.v_all, g), out, dout, lse,
                                                w.delta,
                                                scope(g, documents), dq_acc, block(dk, w.dk_all, g),
                                                block(dv, w.dv_all, g), w.kernel);
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
