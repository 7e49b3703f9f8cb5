#pragma once
// Attention when one rank holds the whole sequence (or the strategy 'local'
// under pure data parallelism): the blockwise kernel on local data.
#include "attention/attention_strategy.hpp"
#include "kernels/attention.hpp"

namespace miniattn {

template <class T>
class LocalAttention final : public AttentionStrategy<T> {
 public:
  // positions: global position of each local row; shape gives [B, H, n] of the row statistics.
  LocalAttention(const View1<const index_t>& positions, bool causal, const kernels::AttentionBlocking& blocking,
                 index_t batch, index_t heads);

  void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const View4<T>& out,
               const View3<T>& lse) override;
  void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                const View4<const T>& out, const View3<const T>& lse, const View4<const T>& dout,
                const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) override;
  std::string name() const override { return "local"; }

 private:
  View1<const index_t> positions_;
  bool causal_;
  kernels::AttentionBlocking blocking_;
  View3<T> row_sum_;  // forward workspace
  View3<T> delta_;    // backward: rowsum(dout * out)
};

}  // namespace miniattn
