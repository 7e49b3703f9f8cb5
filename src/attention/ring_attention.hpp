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
// 'local' is this class on one rank.
#include <mpi.h>

#include "attention/attention_strategy.hpp"
#include "comm/comm.hpp"
#include "kernels/attention.hpp"

namespace miniattn {

template <class T>
class RingAttention final : public AttentionStrategy<T> {
 public:
  // ring_positions [G, m]: global positions of the rows held by each ring rank;
  // q/k/v given to forward() are [B, heads, m, Dh].
  RingAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions, bool causal,
                const kernels::AttentionBlocking& blocking, index_t batch, index_t heads, index_t head_dim,
                std::string name);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const View4<T>& out,
               const View3<T>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                const View4<const T>& out, const View3<const T>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::string name() const override { return name_; }
  std::size_t allocated_bytes() const override;

 private:
  View1<const index_t> positions_of(int ring_rank) const;

  Comm& comm_;
  MPI_Comm ring_;
  int rank_ = 0, size_ = 1;
  View2<const index_t> ring_positions_;
  bool causal_;
  kernels::AttentionBlocking blocking_;
  std::string name_;
  View3<T> row_sum_, delta_;
  // Two K/V blocks in flight (current, next) and, for the backward pass, two
  // pairs of travelling dK/dV accumulators. Allocated only for rings of > 1 rank.
  View4<T> k_buffer_[2], v_buffer_[2], dk_buffer_[2], dv_buffer_[2];
};

}  // namespace miniattn
