#pragma once
// Context parallelism by all-gather (the form Llama 3 trains with): every rank
// of the group gathers the whole sequence's K and V, computes attention for
// its own queries locally and, in the backward pass, gathers K and V again and
// reduce-scatters the dK, dV contributions back to the ranks that own those
// keys. Nothing overlaps the exchanges; in return each rank computes all its
// work at once (no ring steps to synchronise), and the layout (zigzag or
// striped) balances the causal work; blocks a sliding window hides whole are
// skipped (the all-gathers still carry them). The gathered K/V/dK/dV are O(N)
// per rank.
#include <mpi.h>

#include <memory>
#include <vector>

#include "attention/attention_strategy.hpp"
#include "attention/strategy_table.hpp"
#include "comm/comm.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

const StrategyRecord& allgather_attention_record();  // strategy_record.hpp

// Buffers shared by the all-gather attention of every layer: each rank's K, V
// (forward and backward) and dK, dV contributions (backward) as `group_size`
// consecutive blocks of [B, KV, m, Dh] in group-rank order (none for a group of
// one rank), and row statistics.
template <class T>
struct AllGatherWorkspace {
  View3<Acc<T>> row_sum, delta;
  View1<T> k_all, v_all, dk_all, dv_all;
  kernels::AttentionWorkspace<T> kernel;  // the attention kernels' scratch for one block

  explicit AllGatherWorkspace(const AttentionSizes& sizes);  // a group of sizes.sp ranks
  std::size_t bytes() const;
};

template <class T>
class AllGatherAttention final : public AttentionStrategy<T> {
 public:
  // group_positions [G, m]: global positions of the rows held by each group rank.
  AllGatherAttention(Comm& comm, MPI_Comm group, const View2<const index_t>& group_positions,
                     const kernels::AttentionMask& mask, const kernels::AttentionBlocking& blocking,
                     std::shared_ptr<AllGatherWorkspace<T>> workspace);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
               const View4<T>& out, const View3<Acc<T>>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const DocumentIds& documents,
                const View4<const T>& out, const View3<const Acc<T>>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::size_t allocated_bytes() const override { return 0; }  // all in the shared workspace

 private:
  // This rank's queries against the keys of group rank `source` (its positions), under the mask and the documents.
  kernels::AttentionScope scope(int source, const DocumentIds& documents) const;
  // Block g of a gathered buffer, shaped like `own` (own itself in a group of one).
  template <class U>
  View4<U> block(const View4<U>& own, const View1<T>& all, int g) const;
  void gather_keys_values(const View4<const T>& k, const View4<const T>& v, Exchange label);

  Comm& comm_;
  MPI_Comm group_;
  int rank_ = 0, size_ = 1;
  View2<const index_t> group_positions_;
  kernels::AttentionMask mask_;
  std::vector<char> sees_;  // sees_[g]: this rank's queries see group rank g's keys
  kernels::AttentionBlocking blocking_;
  std::shared_ptr<AllGatherWorkspace<T>> workspace_;
};

}  // namespace miniattn
