#include "attention/ring_self_attention.hpp"

#include "attention/ring_backward_pass.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

namespace {

template <class T>
LayerMaker<T> make_rsa_layers(const AttentionBuild& build, std::size_t&) {
  return [build](const kernels::AttentionMask& mask) -> std::unique_ptr<AttentionStrategy<T>> {
    return std::make_unique<RingSelfAttention<T>>(build.comm, build.grid.ring_comm, build.positions, mask,
                                                  build.sizes);
  };
}

// Per layer: the n x N score rows (of every head), the backward's dS rows, the
// ring's buffers, delta and (bf16) the output and dq accumulators.
AttentionMemory rsa_memory(const AttentionSizes& z) {
  const auto size = [](index_t x) { return static_cast<std::size_t>(x); };
  const std::size_t s = z.value_bytes, a = z.acc_bytes, R = size(z.batch * z.rows), H = size(z.heads);
  const std::size_t N = size(z.sp * z.rows), Dk = size(z.kv_heads * z.head_dim), Da = size(z.heads * z.head_dim);
  const std::size_t dense_rows = size(kernels::dense_backward_rows(z.rows));
  AttentionMemory memory;
  memory.per_layer = (R * H * N + R * H * dense_rows + 8 * R * Dk) * s + R * H * a + (s != a ? 2 * R * Da * a : 0);
  return memory;
}

// Per layer over P ranks: K and V go round once each in the forward pass,
// together in the backward pass, the dK/dV accumulators P times.
void add_rsa_exchanges(const AttentionSizes& z, double layers, std::map<Exchange, double>& bytes) {
  const double P = z.sp, L = layers;
  if (P <= 1) return;
  const double X_kv = z.block_bytes(z.kv_heads);
  bytes[Exchange::rsa_forward_k] = L * (P - 1) * X_kv;
  bytes[Exchange::rsa_forward_v] = L * (P - 1) * X_kv;
  bytes[Exchange::rsa_backward_kv] = L * 2 * (P - 1) * X_kv;
  bytes[Exchange::rsa_backward_dkdv] = L * 2 * P * X_kv;
}

}  // namespace

// RSA computes dense score blocks with kernels of its own (kernels/attention/dense/).
const StrategyRecord& ring_self_attention_record() {
  static const StrategyRecord record{
      Strategy::rsa,
      /*splits_sequence=*/true,
      UlyssesDegree::none,
      /*takes_attention_kernel=*/false,
      KeyValueRoute::dense_ring,
      {Exchange::rsa_forward_k, Exchange::rsa_forward_v, Exchange::rsa_backward_kv, Exchange::rsa_backward_dkdv},
      rsa_memory,
      add_rsa_exchanges,
      make_rsa_layers<float>,
      make_rsa_layers<double>,
      make_rsa_layers<bf16>};
  return record;
}

template <class T>
RingSelfAttention<T>::RingSelfAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions,
                                        const kernels::AttentionMask& mask, const AttentionSizes& sizes)
    : comm_(comm), ring_(ring), ring_positions_(ring_positions), mask_(mask) {
  MPI_Comm_rank(ring, &rank_);
  MPI_Comm_size(ring, &size_);
  const index_t n = sizes.rows, batch = sizes.batch, heads = sizes.heads, kv_heads = sizes.kv_heads;
  const index_t head_dim = sizes.head_dim;
  probabilities_ = kernels::View5<T>("rsa.probabilities", size_, batch, heads, n, n);
  delta_ = View3<Acc<T>>("rsa.delta", batch, heads, n);
  if (!std::is_same<T, Acc<T>>::value) {
    out_acc_ = View4<Acc<T>>("rsa.out_acc", batch, heads, n, head_dim);
    dq_acc_ = View4<Acc<T>>("rsa.dq_acc", batch, heads, n, head_dim);
  }
  score_grads_ = View4<T>("rsa.score_grads", batch, heads, kernels::dense_backward_rows(n), n);
  for (int i = 0; i < 2; ++i) {
    buffer_[i] = View4<T>("rsa.buffer", batch, kv_heads, n, head_dim);
    second_buffer_[i] = View4<T>("rsa.second_buffer", batch, kv_heads, n, head_dim);
    dk_buffer_[i] = View4<T>("rsa.dk_buffer", batch, kv_heads, n, head_dim);
    dv_buffer_[i] = View4<T>("rsa.dv_buffer", batch, kv_heads, n, head_dim);
  }
}

template <class T>
View1<const index_t> RingSelfAttention<T>::positions_of(int ring_rank) const {
  return Kokkos::subview(ring_positions_, ring_rank, Kokkos::ALL());
}

template <class T>
View4<T> RingSelfAttention<T>::probabilities_of(int ring_rank) const {
  return Kokkos::subview(probabilities_, ring_rank, Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL());
}

template <class T>
void RingSelfAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                   const DocumentIds& documents, const View4<T>& out, const View3<Acc<T>>& lse) {
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  // Pass 1: K around the ring; score block of every source rank.
  View4<const T> current = k;
  for (int step = 0; step < size_; ++step) {
    PendingExchange pending;
    if (step + 1 < size_)
      comm_.post_shift(current.data(), buffer_[step % 2].data(), current.span(), next, prev, ring_, Exchange::rsa_forward_k,
                       pending);
    const int source = (rank_ - step + size_) % size_;
    kernels::score_block<T>(q, current, positions_of(rank_), positions_of(source), mask_.with_documents(documents),
                            probabilities_of(source));
    comm_.wait(pending);
    current = buffer_[step % 2];
  }
  kernels::softmax_over_blocks<T>(probabilities_, lse);
  // Pass 2: V around the ring; out = sum over blocks of P_block V_block.
  const View4<Acc<T>> out_acc = kernels::accumulator_of(out, out_acc_);
  Kokkos::deep_copy(out_acc, Acc<T>(0));
  current = v;
  for (int step = 0; step < size_; ++step) {
    PendingExchange pending;
    if (step + 1 < size_)
      comm_.post_shift(current.data(), buffer_[step % 2].data(), current.span(), next, prev, ring_, Exchange::rsa_forward_v,
                       pending);
    const int source = (rank_ - step + size_) % size_;
    kernels::apply_probabilities<T>(probabilities_of(source), current, out_acc);
    comm_.wait(pending);
    current = buffer_[step % 2];
  }
  kernels::round_accumulator<T>(out_acc, out);  // rounds to T when they differ
}

template <class T>
void RingSelfAttention<T>::backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                    const DocumentIds&, const View4<const T>& out, const View3<const Acc<T>>&,
                                    const View4<const T>& dout, const View4<T>& dq, const View4<T>& dk,
                                    const View4<T>& dv) {  // the probabilities saved have the documents' mask
  kernels::attention_backward_delta<T>(out, dout, delta_);
  const View4<Acc<T>> dq_acc = kernels::accumulator_of(dq, dq_acc_);
  Kokkos::deep_copy(dq_acc, Acc<T>(0));
  const RingBackwardBuffers<T> buffers{buffer_, second_buffer_, dk_buffer_, dv_buffer_};
  ring_backward_pass<T>(comm_, ring_, rank_, size_, size_, k, v, dk, dv, buffers,
                        {Exchange::rsa_backward_kv, Exchange::rsa_backward_dkdv},
                        [&](int source, const View4<const T>& k_block, const View4<const T>& v_block,
                            const View4<T>& dk_block, const View4<T>& dv_block) {
                          kernels::dense_block_backward<T>(probabilities_of(source), q, k_block, v_block, dout, delta_,
                                                           score_grads_, dq_acc, dk_block, dv_block);
                        });
  kernels::round_accumulator<T>(dq_acc, dq);
}

template <class T>
std::size_t RingSelfAttention<T>::allocated_bytes() const {
  std::size_t bytes = view_bytes(probabilities_) + view_bytes(delta_) + view_bytes(score_grads_) +
                      view_bytes(out_acc_) + view_bytes(dq_acc_);
  for (int i = 0; i < 2; ++i)
    bytes += view_bytes(buffer_[i]) + view_bytes(second_buffer_[i]) + view_bytes(dk_buffer_[i]) +
             view_bytes(dv_buffer_[i]);
  return bytes;
}

template class RingSelfAttention<float>;
template class RingSelfAttention<double>;
template class RingSelfAttention<bf16>;

}  // namespace miniattn
