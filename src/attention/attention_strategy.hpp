#pragma once
// One interface for every way of computing multi-head attention over a
// sequence that may be split across ranks (docs/design.md section 3). Inputs and
// outputs are this rank's local rows in head-major layout [B, H, n, Dh]; a
// strategy may exchange data with other ranks of its sequence-parallel group.
// T is the activations' storage (fp32, fp64 or bf16); the log-sum-exp and
// every accumulation are Acc<T> (fp32 for bf16).
#include <cstddef>
#include <memory>
#include <vector>

#include "core/types.hpp"

namespace miniattn {

template <class T>
class AttentionStrategy {
 public:
  virtual ~AttentionStrategy() = default;

  // out = softmax(q k^T / sqrt(Dh) + mask) v over the whole (global) sequence;
  // lse receives each local query row's log-sum-exp for the backward pass.
  // documents: the micro-batch's document ids (core/types.hpp).
  virtual void forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                       const DocumentIds& documents, const View4<T>& out, const View3<Acc<T>>& lse) = 0;

  // dq, dk, dv (overwritten) from dout, using the forward's out and lse (and its documents).
  virtual void backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                        const DocumentIds& documents, const View4<const T>& out, const View3<const Acc<T>>& lse,
                        const View4<const T>& dout, const View4<T>& dq, const View4<T>& dk, const View4<T>& dv) = 0;

  // Bytes of the Views this strategy allocated (workspaces and saved tensors).
  virtual std::size_t allocated_bytes() const = 0;
};

// A stage's attention: one strategy per micro-batch slot and layer
// (slot-major) and the bytes of the workspaces they share.
template <class T>
struct AttentionLayers {
  std::vector<std::unique_ptr<AttentionStrategy<T>>> layers;
  std::size_t shared_workspace_bytes = 0;
};

template <class View>
std::size_t view_bytes(const View& v) {
  return v.span() * sizeof(typename View::value_type);
}

}  // namespace miniattn
