#pragma once
// AdamW (PyTorch's update order: decoupled decay, then the Adam step) and SGD
// over both parameter buffers. Weight decay applies to matrices only
// (ParameterInfo::weight_decay). Every rank holds the same global gradients,
// so the update is identical on every rank and parameters never drift.
#include "core/config.hpp"
#include "model/parameter_layout.hpp"
#include "model/parameters.hpp"

namespace miniattn {

template <class T>
class Optimizer {
 public:
  Optimizer(const TrainConfig& train, const ParameterLayout& layout);

  // params -= update(grad_scale * grads); grad_scale carries gradient clipping.
  void step(const ParameterBuffers<T>& params, const ParameterBuffers<T>& grads, double grad_scale);

  index_t steps_taken() const { return steps_taken_; }
  // On restart: the count from the checkpoint (Adam's bias correction depends on it).
  void set_steps_taken(index_t steps) { steps_taken_ = steps; }
  const ParameterBuffers<T>& first_moment() const { return m_; }
  const ParameterBuffers<T>& second_moment() const { return v_; }
  // Whether first_moment() / second_moment() exist (adamw; sgd keeps none). Their
  // Views are shallow-const: a checkpoint reader can fill them through these.
  bool has_moments() const { return m_.replicated.extent(0) > 0 || m_.sharded.extent(0) > 0; }

 private:
  // One update kernel per flat buffer: ranges [begin, end) of elements that
  // share a weight-decay flag, at most kUpdateRange long (the parallel items).
  struct Ranges {
    Kokkos::View<index_t* [2], Kokkos::LayoutRight, MemSpace> bounds;
    Kokkos::View<bool*, MemSpace> decay;
  };
  Ranges ranges_of(bool sharded) const;
  void update(const View1<T>& p, const View1<T>& g, const View1<T>& m, const View1<T>& v, const Ranges& ranges,
              T grad_scale) const;

  TrainConfig train_;
  const ParameterLayout& layout_;
  ParameterBuffers<T> m_, v_;  // allocated for adamw only
  Ranges replicated_ranges_, sharded_ranges_;
  index_t steps_taken_ = 0;
};

}  // namespace miniattn
