#include "attention/ulysses_attention.hpp"

#include <type_traits>
#include <utility>
#include <vector>

#include "attention/ring_attention.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"

namespace miniattn {

namespace {

// A [B, H, n] row-statistics view seen as [B, H, n, 1], so that it travels
// through the all-to-all as a tensor does.
template <class T>
View4<T> as_4d(const View3<T>& x) {
  return View4<T>(x.data(), x.extent(0), x.extent(1), x.extent(2), 1);
}

// An exchange buffer's memory as [U, B, heads, n, columns]: sized for Hl heads
// of Dh columns, a tensor of fewer heads (K/V under GQA) or columns (lse) uses
// its first part.
template <class U, class Memory>
kernels::View5<U> buffer(const Memory& memory, index_t heads, index_t columns) {
  return kernels::View5<U>(reinterpret_cast<U*>(memory.data()), memory.extent(0), memory.extent(1), heads,
                           memory.extent(3), columns);
}

// Where the all-to-all puts each row it gathers (gathered_rows), one table all layers share.
View1<const index_t> gathered_rows_table(const AttentionBuild& build, std::size_t& shared_bytes) {
  const AttentionSizes& z = build.sizes;
  const std::vector<index_t> rows = gathered_rows(z.rows * z.sp, z.sp, z.ulysses, build.grid.ring_rank, build.layout);
  View1<index_t> table("ulysses.gathered_rows", rows.size());
  Kokkos::deep_copy(table, Kokkos::View<const index_t*, HostSpace, Kokkos::MemoryUnmanaged>(rows.data(), rows.size()));
  shared_bytes += table.span() * sizeof(index_t);
  return table;
}

template <class T>
LayerMaker<T> make_ulysses_layers(const AttentionBuild& build, std::size_t& shared_bytes) {
  const LayerMaker<T> inner = ring_attention_record().make_layers<T>()(build, shared_bytes);
  const View1<const index_t> rows = gathered_rows_table(build, shared_bytes);
  return [build, inner, rows](const kernels::AttentionMask& mask) -> std::unique_ptr<AttentionStrategy<T>> {
    return std::make_unique<UlyssesAttention<T>>(build.comm, build.grid.ulysses_comm, inner(mask), build.sizes,
                                                 rows);
  };
}

// Ring attention's shared workspace; per layer the exchange buffers, the
// head-split tensors and their lse, and (bf16) the lse's own buffers.
AttentionMemory ulysses_attention_memory(const AttentionSizes& z) {
  const std::size_t s = z.value_bytes, a = z.acc_bytes, U = static_cast<std::size_t>(z.ulysses);
  const std::size_t R = static_cast<std::size_t>(z.batch * z.rows), H = static_cast<std::size_t>(z.heads);
  const std::size_t Da = H * static_cast<std::size_t>(z.head_dim);
  const std::size_t Du = U * static_cast<std::size_t>(kv_heads_after_all_to_all(z.kv_heads, z.ulysses) * z.head_dim);
  AttentionMemory memory = ring_attention_memory(z);
  memory.shared += U * static_cast<std::size_t>(z.rows) * sizeof(index_t);  // gathered_rows_table
  memory.per_layer = (2 * R * Da + 4 * R * Da + 4 * R * Du) * s + R * H * a + (s != a ? 2 * R * H * a : 0);
  return memory;
}

// Every all-to-all is called, also on one rank, where it sends nothing.
void add_ulysses_attention_exchanges(const AttentionSizes& z, double layers, std::map<Exchange, double>& bytes) {
  const double L = layers, U = z.ulysses, share = (U - 1) / U;
  const double b = static_cast<double>(z.batch), n = static_cast<double>(z.rows), H = static_cast<double>(z.heads);
  const double X = z.block_bytes(z.heads);
  const double X_kv = z.block_bytes(z.ulysses * kv_heads_after_all_to_all(z.kv_heads, z.ulysses));
  bytes[Exchange::ulysses_forward_qkv] = L * (X + 2 * X_kv) * share;
  bytes[Exchange::ulysses_forward_out] = L * X * share;
  bytes[Exchange::ulysses_forward_lse] = L * b * H * n * static_cast<double>(z.acc_bytes) * share;
  bytes[Exchange::ulysses_backward_dout] = L * X * share;
  bytes[Exchange::ulysses_backward_dqkv] = L * (X + 2 * X_kv) * share;
  add_ring_attention_exchanges(z, layers, bytes);
}

// The all-to-alls' labels, then (hybrid: a ring of sp / U > 1 ranks) the inner ring's.
std::vector<Exchange> ulysses_exchanges(bool around_a_ring) {
  std::vector<Exchange> labels = {Exchange::ulysses_forward_qkv, Exchange::ulysses_forward_out,
                                  Exchange::ulysses_forward_lse, Exchange::ulysses_backward_dout,
                                  Exchange::ulysses_backward_dqkv};
  const std::vector<Exchange>& ring = ring_attention_record().exchanges;
  if (around_a_ring) labels.insert(labels.end(), ring.begin(), ring.end());
  return labels;
}

// ulysses: all-to-alls over the whole SP group around local attention;
// hybrid: over U = parallel.ulysses_degree ranks around ring attention across
// the sp / U groups. One class, two records.
StrategyRecord ulysses_record(Strategy strategy, UlyssesDegree degree) {
  return {strategy,
          /*splits_sequence=*/true,
          degree,
          /*takes_attention_kernel=*/true,
          KeyValueRoute::ring,
          ulysses_exchanges(/*around_a_ring=*/degree == UlyssesDegree::deck),
          ulysses_attention_memory,
          add_ulysses_attention_exchanges,
          make_ulysses_layers<float>,
          make_ulysses_layers<double>,
          make_ulysses_layers<bf16>};
}

}  // namespace

const StrategyRecord& ulysses_attention_record() {
  static const StrategyRecord record = ulysses_record(Strategy::ulysses, UlyssesDegree::sp);
  return record;
}

const StrategyRecord& hybrid_attention_record() {
  static const StrategyRecord record = ulysses_record(Strategy::hybrid, UlyssesDegree::deck);
  return record;
}

template <class T>
UlyssesAttention<T>::UlyssesAttention(Comm& comm, MPI_Comm ulysses, std::unique_ptr<AttentionStrategy<T>> inner,
                                      const AttentionSizes& sizes, const View1<const index_t>& gathered_rows)
    : comm_(comm), ulysses_(ulysses), inner_(std::move(inner)), gathered_rows_(gathered_rows) {
  const index_t U = sizes.ulysses, Hl = sizes.heads / U, local_rows = sizes.rows, rows = U * local_rows;
  const index_t KVl = kv_heads_after_all_to_all(sizes.kv_heads, U), batch = sizes.batch, head_dim = sizes.head_dim;
  send_ = kernels::View5<T>("ulysses.send", U, batch, Hl, local_rows, head_dim);
  receive_ = kernels::View5<T>("ulysses.receive", U, batch, Hl, local_rows, head_dim);
  q_heads_ = View4<T>("ulysses.q", batch, Hl, rows, head_dim);
  k_heads_ = View4<T>("ulysses.k", batch, KVl, rows, head_dim);
  v_heads_ = View4<T>("ulysses.v", batch, KVl, rows, head_dim);
  out_heads_ = View4<T>("ulysses.out", batch, Hl, rows, head_dim);
  lse_heads_ = View3<Acc<T>>("ulysses.lse", batch, Hl, rows);
  if (std::is_same<T, Acc<T>>::value) {
    lse_send_ = buffer<Acc<T>>(send_, Hl, 1);
    lse_receive_ = buffer<Acc<T>>(receive_, Hl, 1);
  } else {
    lse_send_ = kernels::View5<Acc<T>>("ulysses.lse_send", U, batch, Hl, local_rows, 1);
    lse_receive_ = kernels::View5<Acc<T>>("ulysses.lse_receive", U, batch, Hl, local_rows, 1);
  }
  dout_heads_ = View4<T>("ulysses.dout", batch, Hl, rows, head_dim);
  dq_heads_ = View4<T>("ulysses.dq", batch, Hl, rows, head_dim);
  dk_heads_ = View4<T>("ulysses.dk", batch, KVl, rows, head_dim);
  dv_heads_ = View4<T>("ulysses.dv", batch, KVl, rows, head_dim);
}

template <class T>
void UlyssesAttention<T>::to_heads(const View4<const T>& sequence_split, const View4<T>& head_split,
                                   Exchange label) {
  const kernels::View5<T> send = buffer<T>(send_, head_split.extent(1), head_split.extent(3));
  const kernels::View5<T> receive = buffer<T>(receive_, head_split.extent(1), head_split.extent(3));
  kernels::pack_heads<T>(sequence_split, send);
  comm_.alltoall(send.data(), receive.data(), send.span() / send.extent(0), ulysses_, label);
  kernels::unpack_rows<T>(receive, gathered_rows_, head_split);
}

template <class T>
template <class U>
void UlyssesAttention<T>::to_sequence(const View4<const U>& head_split, const View4<U>& sequence_split,
                                      const kernels::View5<U>& send_memory, const kernels::View5<U>& receive_memory,
                                      Exchange label) {
  const kernels::View5<U> send = buffer<U>(send_memory, head_split.extent(1), head_split.extent(3));
  const kernels::View5<U> receive = buffer<U>(receive_memory, head_split.extent(1), head_split.extent(3));
  kernels::pack_rows<U>(head_split, gathered_rows_, send);
  comm_.alltoall(send.data(), receive.data(), send.span() / send.extent(0), ulysses_, label);
  kernels::unpack_heads<U>(receive, sequence_split);
}

template <class T>
void UlyssesAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                  const DocumentIds& documents, const View4<T>& out, const View3<Acc<T>>& lse) {
  to_heads(q, q_heads_, Exchange::ulysses_forward_qkv);
  to_heads(k, k_heads_, Exchange::ulysses_forward_qkv);
  to_heads(v, v_heads_, Exchange::ulysses_forward_qkv);
  inner_->forward(q_heads_, k_heads_, v_heads_, documents, out_heads_, lse_heads_);
  to_sequence<T>(out_heads_, out, send_, receive_, Exchange::ulysses_forward_out);
  to_sequence<Acc<T>>(as_4d(lse_heads_), as_4d(lse), lse_send_, lse_receive_, Exchange::ulysses_forward_lse);
}

template <class T>
void UlyssesAttention<T>::backward(const View4<const T>&, const View4<const T>&, const View4<const T>&,
                                   const DocumentIds& documents, const View4<const T>&, const View3<const Acc<T>>&,
                                   const View4<const T>& dout, const View4<T>& dq, const View4<T>& dk,
                                   const View4<T>& dv) {
  // q, k, v, out and lse of the forward pass are still here, head-split.
  to_heads(dout, dout_heads_, Exchange::ulysses_backward_dout);
  inner_->backward(q_heads_, k_heads_, v_heads_, documents, out_heads_, lse_heads_, dout_heads_, dq_heads_,
                   dk_heads_, dv_heads_);
  to_sequence<T>(dq_heads_, dq, send_, receive_, Exchange::ulysses_backward_dqkv);
  to_sequence<T>(dk_heads_, dk, send_, receive_, Exchange::ulysses_backward_dqkv);
  to_sequence<T>(dv_heads_, dv, send_, receive_, Exchange::ulysses_backward_dqkv);
}

template <class T>
std::size_t UlyssesAttention<T>::allocated_bytes() const {
  std::size_t bytes = inner_->allocated_bytes() + view_bytes(send_) + view_bytes(receive_) + view_bytes(lse_heads_);
  if (!std::is_same<T, Acc<T>>::value) bytes += view_bytes(lse_send_) + view_bytes(lse_receive_);
  for (const View4<T>* v : {&q_heads_, &k_heads_, &v_heads_, &out_heads_, &dout_heads_, &dq_heads_, &dk_heads_,
                            &dv_heads_})
    bytes += view_bytes(*v);
  return bytes;
}

template class UlyssesAttention<float>;
template class UlyssesAttention<double>;
template class UlyssesAttention<bf16>;

}  // namespace miniattn
