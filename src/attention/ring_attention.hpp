#pragma once
// Blockwise ring attention with an online softmax. The G ranks of a ring each
// hold m query/key/value rows; key/value blocks travel around the ring while
// every rank folds the block it holds into its running softmax state. K/V are
// double-buffered: the transfer of the next block is posted before the
// current block is computed, so it hides behind compute. The backward pass
// sends K, V and the travelling dK, dV accumulators around the ring and
// recomputes probabilities from the saved log-sum-exp.
//
// A ring of one rank (MPI_COMM_SELF) is plain local attention: the strategy
// 'local' is this class on one rank. Under a sliding window a ring may stop
// after fewer than G steps (block_reach.hpp), and a rank skips the blocks its
// queries cannot see.
#include <mpi.h>

#include <memory>
#include <vector>

#include "attention/attention_strategy.hpp"
#include "attention/strategy_table.hpp"
#include "comm/comm.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// Buffers a ring pass needs only while it runs, shared by the ring attention
// of every layer: two K/V blocks in flight (current, next), two pairs of
// travelling dK/dV accumulators (rings of more than one rank only), and row
// statistics. K/V blocks carry the kv_heads K/V heads (GQA: fewer than the
// query heads), so a ring sends only those. After a Ulysses all-to-all of
// degree U a ring rank holds heads / U query heads over U x rows positions.
template <class T>
struct RingWorkspace {
  View3<Acc<T>> row_sum, delta;
  View4<T> k[2], v[2], dk[2], dv[2];
  kernels::AttentionWorkspace<T> kernel;  // the attention kernels' scratch for one block

  explicit RingWorkspace(const AttentionSizes& sizes);
  std::size_t bytes() const;
};

// Ring attention's records (local and ring; strategy_record.hpp), and what
// Ulysses attention, which runs it inside, shares of it: the workspace's
// bytes (shared) and the ring's exchanges.
const StrategyRecord& local_attention_record();
const StrategyRecord& ring_attention_record();
AttentionMemory ring_attention_memory(const AttentionSizes& sizes);
void add_ring_attention_exchanges(const AttentionSizes& sizes, double layers, std::map<Exchange, double>& bytes);

template <class T>
class RingAttention final : public AttentionStrategy<T> {
 public:
  // ring_positions [G, m]: global positions of the rows held by each ring rank;
  // q/k/v given to forward() are [B, heads, m, Dh].
  // workspace: shaped [batch, heads, m, Dh] for this ring; steps: ring_steps().
  RingAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions,
                const kernels::AttentionMask& mask, int steps, const kernels::AttentionBlocking& blocking,
                std::shared_ptr<RingWorkspace<T>> workspace);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
               const View4<T>& out, const View3<Acc<T>>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
                const View4<const T>& out, const View3<const Acc<T>>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::size_t allocated_bytes() const override { return 0; }  // all in the shared workspace

 private:
  // This rank's queries against the keys of ring rank `source` (its positions), under the mask and the documents.
  kernels::AttentionScope scope(int source, const DocumentIds& documents) const;

  Comm& comm_;
  MPI_Comm ring_;
  int rank_ = 0, size_ = 1, steps_ = 1;
  View2<const index_t> ring_positions_;
  kernels::AttentionMask mask_;
  std::vector<char> sees_;  // sees_[g]: this rank's queries see ring rank g's keys
  kernels::AttentionBlocking blocking_;
  std::shared_ptr<RingWorkspace<T>> workspace_;
};

}  // namespace miniattn
