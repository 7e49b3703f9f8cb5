#include "attention/ring_attention.hpp"

#include <utility>
#include <vector>

#include "attention/block_reach.hpp"
#include "attention/ring_backward_pass.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"

namespace miniattn {

namespace {

// One ring rank's block: all of a layer's attention, or after a Ulysses
// all-to-all of degree U, heads / U query heads, the K/V heads left to them
// and U x rows positions.
kernels::AttentionShape ring_block(const AttentionSizes& z) {
  const index_t U = z.ulysses, rows = U * z.rows;
  return {z.batch, z.heads / U, kv_heads_after_all_to_all(z.kv_heads, U), z.head_dim, rows, rows};
}

template <class T>
LayerMaker<T> make_ring_layers(const AttentionBuild& build, std::size_t& shared_bytes) {
  auto workspace = std::make_shared<RingWorkspace<T>>(build.sizes);
  shared_bytes += workspace->bytes();
  return [build, workspace](const kernels::AttentionMask& mask) -> std::unique_ptr<AttentionStrategy<T>> {
    return std::make_unique<RingAttention<T>>(build.comm, build.grid.ring_comm, build.positions, mask,
                                              build.sizes.ring_steps, build.sizes.blocking, workspace);
  };
}

}  // namespace

// Its row statistics, the kernels' scratch and (rings of more than one rank)
// the travelling K/V/dK/dV double buffers.
AttentionMemory ring_attention_memory(const AttentionSizes& z) {
  const kernels::AttentionShape block = ring_block(z);
  const std::size_t s = z.value_bytes, a = z.acc_bytes;
  const auto size = [](index_t x) { return static_cast<std::size_t>(x); };
  const std::size_t rows = size(block.batch) * size(block.heads) * size(block.queries);
  const std::size_t kv = size(block.batch) * size(block.kv_heads) * size(block.keys) * size(block.head_dim);
  AttentionMemory memory;
  memory.shared = 2 * rows * a + kernels::attention_workspace_bytes(block, z.blocking, s, a) +
                  (z.ring_size() > 1 ? 8 * kv * s : 0);
  memory.cudnn_workspace = kernels::cudnn_workspace_bytes(block, z.blocking);
  return memory;
}

// Over G ring ranks and S ring steps (G, fewer under a sliding window), per
// layer, K/V blocks of X bytes move S - 1 times each way, the dK/dV
// accumulators S - 1 times and then home.
void add_ring_attention_exchanges(const AttentionSizes& z, double layers, std::map<Exchange, double>& bytes) {
  const double G = z.ring_size(), S = z.ring_steps, L = layers;
  if (G <= 1) return;
  const double X = z.block_bytes(z.ulysses * ring_block(z).kv_heads);  // U n rows of the K/V heads left
  bytes[Exchange::ring_forward_kv] += L * 2 * (S - 1) * X;
  bytes[Exchange::ring_backward_kv] += L * 2 * (S - 1) * X;
  bytes[Exchange::ring_backward_dkdv] += L * 2 * (S > 1 ? S : 0) * X;
}

namespace {

StrategyRecord ring_record(Strategy strategy, bool splits_sequence, std::vector<Exchange> exchanges) {
  return {strategy,
          splits_sequence,
          UlyssesDegree::none,
          /*takes_attention_kernel=*/true,
          KeyValueRoute::ring,
          std::move(exchanges),
          ring_attention_memory,
          add_ring_attention_exchanges,
          make_ring_layers<float>,
          make_ring_layers<double>,
          make_ring_layers<bf16>};
}

}  // namespace

// local is ring attention on a ring of one rank (sp = 1): no exchanges.
const StrategyRecord& local_attention_record() {
  static const StrategyRecord record = ring_record(Strategy::local, /*splits_sequence=*/false, {});
  return record;
}

const StrategyRecord& ring_attention_record() {
  static const StrategyRecord record =
      ring_record(Strategy::ring, /*splits_sequence=*/true,
                  {Exchange::ring_forward_kv, Exchange::ring_backward_kv, Exchange::ring_backward_dkdv});
  return record;
}

template <class T>
RingWorkspace<T>::RingWorkspace(const AttentionSizes& sizes) : kernel(ring_block(sizes), sizes.blocking) {
  const kernels::AttentionShape block = ring_block(sizes);
  const index_t batch = block.batch, kv_heads = block.kv_heads, rows = block.keys, head_dim = block.head_dim;
  row_sum = View3<Acc<T>>("ring.row_sum", batch, block.heads, rows);
  delta = View3<Acc<T>>("ring.delta", batch, block.heads, rows);
  if (sizes.ring_size() < 2) return;
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
                                const kernels::AttentionBlocking& blocking, std::shared_ptr<RingWorkspace<T>> workspace)
    : comm_(comm), ring_(ring), steps_(steps), ring_positions_(ring_positions), mask_(mask), blocking_(blocking),
      workspace_(std::move(workspace)) {
  MPI_Comm_rank(ring, &rank_);
  MPI_Comm_size(ring, &size_);
  sees_ = rows_seen_from(ring_positions, rank_, mask);
}

template <class T>
kernels::AttentionScope RingAttention<T>::scope(int source, const DocumentIds& documents) const {
  const auto row = [&](int r) { return Kokkos::subview(ring_positions_, r, Kokkos::ALL()); };
  return {row(rank_), row(source), mask_.with_documents(documents), blocking_};
}

template <class T>
void RingAttention<T>::forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                               const DocumentIds& documents, const View4<T>& out, const View3<Acc<T>>& lse) {
  const View3<Acc<T>>& row_max = lse;  // lse doubles as the running maximum until finalize
  const View4<Acc<T>> out_acc = kernels::accumulator_of(out, workspace_->kernel);
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
      kernels::attention_forward_accumulate<T>(q, k_current, v_current, scope(source, documents), out_acc, row_max,
                                               workspace_->row_sum, workspace_->kernel);
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
                                const DocumentIds& documents, const View4<const T>& out, const View3<const Acc<T>>& lse,
                                const View4<const T>& dout, const View4<T>& dq, const View4<T>& dk,
                                const View4<T>& dv) {
  kernels::attention_backward_delta<T>(out, dout, workspace_->delta);
  const View4<Acc<T>> dq_acc = kernels::accumulator_of(dq, workspace_->kernel);
  Kokkos::deep_copy(dq_acc, Acc<T>(0));
  const RingBackwardBuffers<T> buffers{workspace_->k, workspace_->v, workspace_->dk, workspace_->dv};
  ring_backward_pass<T>(comm_, ring_, rank_, size_, steps_, k, v, dk, dv, buffers,
                        {Exchange::ring_backward_kv, Exchange::ring_backward_dkdv},
                        [&](int source, const View4<const T>& k_block, const View4<const T>& v_block,
                            const View4<T>& dk_block, const View4<T>& dv_block) {
                          if (!sees_[static_cast<std::size_t>(source)]) return;
                          kernels::attention_backward_accumulate<T>(q, k_block, v_block, out, dout, lse,
                                                                    workspace_->delta, scope(source, documents),
                                                                    dq_acc, dk_block, dv_block, workspace_->kernel);
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
