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
  TrainConfig train_;
  const ParameterLayout& layout_;
  ParameterBuffers<T> m_, v_;  // allocated for adamw only
  index_t steps_taken_ = 0;
};

// Sum of squares of a buffer, accumulated in double.
template <class T>
double sum_of_squares(const View1<const T>& values);

}  // namespace miniattn
