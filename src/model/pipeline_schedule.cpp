#include "model/pipeline_schedule.hpp"

#include <algorithm>
#include <numeric>

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


std::vector<PipelineOp> interleaved_one_forward_one_backward(int stage, int stages, int chunks,
                                                             index_t micro_batches) {
  if (chunks == 1) return one_forward_one_backward(stage, stages, micro_batches);
  const index_t pp = stages, v = chunks, group = pp * v, total = micro_batches * v;
  const auto op = [&](index_t k, bool forward) {
    const index_t chunk = (k % group) / pp;
    return PipelineOp{forward, (k / group) * pp + k % pp, forward ? chunk : v - 1 - chunk};
  };
  const index_t warm_up = std::min<index_t>(2 * (pp - stage - 1) + (v - 1) * pp, total);
  std::vector<PipelineOp> ops;
  for (index_t k = 0; k < warm_up; ++k) ops.push_back(op(k, true));
  for (index_t k = 0; k < total - warm_up; ++k) {
    ops.push_back(op(warm_up + k, true));
    ops.push_back(op(k, false));
  }
  for (index_t k = total - warm_up; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

std::vector<index_t> interleaved_slots(int stage, int stages, int chunks, index_t micro_batches) {
  std::vector<index_t> in_flight(static_cast<std::size_t>(chunks), 0), most(in_flight);
  for (const PipelineOp& op : interleaved_one_forward_one_backward(stage, stages, chunks, micro_batches)) {
    index_t& n = in_flight[static_cast<std::size_t>(op.chunk)];
    n += op.forward ? 1 : -1;
    most[static_cast<std::size_t>(op.chunk)] = std::max(most[static_cast<std::size_t>(op.chunk)], n);
  }
  return most;
}

index_t pipeline_slots(int stage, int stages, index_t micro_batches, int chunks) {
  if (chunks == 1) return std::min<index_t>(stages - stage, micro_batches);
  const std::vector<index_t> slots = interleaved_slots(stage, stages, chunks, micro_batches);
  return std::accumulate(slots.begin(), slots.end(), index_t{0});
}

double modelled_bubble_fraction(int stages, index_t micro_batches, int chunks) {
  return static_cast<double>(stages - 1) / static_cast<double>(chunks * micro_batches + stages - 1);
}

}  // namespace miniattn
