#include "model/pipeline_schedule.hpp"

#include <algorithm>

namespace miniattn {

std::vector<PipelineOp> one_forward_one_backward(int stage, int stages, index_t micro_batches) {
  const index_t warm_up = std::min<index_t>(stages - stage - 1, micro_batches);
  std::vector<PipelineOp> ops;
  index_t forwards = 0, backwards = 0;
  for (; forwards < warm_up; ++forwards) ops.push_back({true, forwards});
  for (; forwards < micro_batches; ++forwards, ++backwards) {
    ops.push_back({true, forwards});
    ops.push_back({false, backwards});
  }
  for (; backwards < micro_batches; ++backwards) ops.push_back({false, backwards});
  return ops;
}

index_t pipeline_slots(int stage, int stages, index_t micro_batches) {
  return std::min<index_t>(stages - stage, micro_batches);
}

double modelled_bubble_fraction(int stages, index_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace miniattn
