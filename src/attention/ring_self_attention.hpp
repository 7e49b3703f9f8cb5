#pragma once
// Ring Self-Attention (RSA) as the sequence-parallelism paper defines it
// (Li et al., "Sequence Parallelism: Long Sequence Training from System
// Perspective"): K blocks are passed around the ring so each rank builds its
// local score rows Q_r K^T (n x N, the defining memory cost), a softmax runs
// over the whole row, and V blocks are passed around the ring to form P V.
// Backward: K and V travel again, with the dK, dV accumulators of each block
// following them home; the stored probabilities are reused. With grouped K/V
// heads (GQA) only the kv_heads travel.
#include <mpi.h>

#include "attention/attention_strategy.hpp"
#include "attention/strategy_table.hpp"
#include "comm/comm.hpp"
#include "kernels/attention/dense/dense_attention.hpp"

namespace miniattn {

const StrategyRecord& ring_self_attention_record();  // rsa (strategy_record.hpp)

template <class T>
class RingSelfAttention final : public AttentionStrategy<T> {
 public:
  // ring_positions [P, n]: global positions of each ring rank's rows; sizes: this rank's share.
  RingSelfAttention(Comm& comm, MPI_Comm ring, const View2<const index_t>& ring_positions,
                    const kernels::AttentionMask& mask, const AttentionSizes& sizes);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
               const View4<T>& out, const View3<Acc<T>>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
                const View4<const T>& out, const View3<const Acc<T>>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::size_t allocated_bytes() const override;

 private:
  View1<const index_t> positions_of(int ring_rank) const;
  View4<T> probabilities_of(int ring_rank) const;

  Comm& comm_;
  MPI_Comm ring_;
  int rank_ = 0, size_ = 1;
  View2<const index_t> ring_positions_;
  kernels::AttentionMask mask_;
  kernels::View5<T> probabilities_;  // [P, B, H, n, n]: scores, then probabilities, kept for backward
  View3<Acc<T>> delta_;
  View4<Acc<T>> out_acc_, dq_acc_;  // bf16: the output and dq accumulated in fp32 (empty otherwise)
  View4<T> score_grads_;  // [B, H, dense_backward_rows(n), n]: the backward's dP, then dS
  View4<T> buffer_[2], second_buffer_[2], dk_buffer_[2], dv_buffer_[2];
};

}  // namespace miniattn
