#pragma once
// DeepSpeed-Ulysses attention: an all-to-all among U ranks turns
// sequence-split q, k, v [B, H, n, Dh] into head-split [B, H/U, U*n, Dh] (rows
// in position order: group_positions, comm/process_grid.hpp), an
// inner strategy attends over the gathered rows (local attention for
// 'ulysses'; ring attention across Ulysses groups for 'hybrid'), and a second
// all-to-all returns the output to sequence-split layout. Needs H % U == 0.
// Grouped K/V heads (KV < H) are split over the U ranks when KV % U == 0, and
// replicated when U % KV == 0: each rank receives the one K/V head its query
// heads use, and the replicas' gradients are summed on the way back.
// The head-split tensors of the forward pass are kept for the backward pass.
#include <memory>

#include <mpi.h>

#include "attention/attention_strategy.hpp"
#include "attention/strategy_table.hpp"
#include "comm/comm.hpp"
#include "kernels/layers/ulysses_layout.hpp"

namespace miniattn {

// The records of ulysses and hybrid (strategy_record.hpp): ring attention's
// shared workspace and exchanges (over a ring of sp / U ranks) plus its own.
const StrategyRecord& ulysses_attention_record();
const StrategyRecord& hybrid_attention_record();

template <class T>
class UlyssesAttention final : public AttentionStrategy<T> {
 public:
  // sizes: this rank's sequence-split share (sizes.ulysses: the ranks of `ulysses`);
  // gathered_rows: where each gathered row goes (gathered_rows(), comm/process_grid.hpp).
  UlyssesAttention(Comm& comm, MPI_Comm ulysses, std::unique_ptr<AttentionStrategy<T>> inner,
                   const AttentionSizes& sizes, const View1<const index_t>& gathered_rows);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
               const View4<T>& out, const View3<Acc<T>>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
                const View4<const T>& out, const View3<const Acc<T>>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::size_t allocated_bytes() const override;

 private:
  void to_heads(const View4<const T>& sequence_split, const View4<T>& head_split, Exchange label);
  // Through the exchange buffers send, receive ([U, B, H/U, n, columns] of U).
  template <class U>
  void to_sequence(const View4<const U>& head_split, const View4<U>& sequence_split, const kernels::View5<U>& send,
                   const kernels::View5<U>& receive, Exchange label);

  Comm& comm_;
  MPI_Comm ulysses_;
  std::unique_ptr<AttentionStrategy<T>> inner_;
  View1<const index_t> gathered_rows_;                 // [U * n], shared by the layers
  kernels::View5<T> send_, receive_;                   // [U, B, H/U, n, Dh]
  kernels::View5<Acc<T>> lse_send_, lse_receive_;     // [U, B, H/U, n, 1]: send_'s and receive_'s memory
                                                      // when T is Acc<T>, else fp32 buffers of their own
  View4<T> q_heads_, k_heads_, v_heads_, out_heads_;  // saved for backward
  View3<Acc<T>> lse_heads_;
  View4<T> dout_heads_, dq_heads_, dk_heads_, dv_heads_;
};

}  // namespace miniattn
