// The 1F1B schedule against its defining properties and against a simulation
// of the pipeline it drives; the split of layers and parameters over stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "model/parameter_layout.hpp"
#include "model/pipeline_schedule.hpp"

namespace miniattn {
namespace {

TEST(PipelineSchedule, EveryMicroBatchOnceForwardThenBackwardInOrder) {
  for (int stages = 1; stages <= 6; ++stages)
    for (int stage = 0; stage < stages; ++stage)
      for (index_t m = 1; m <= 9; ++m) {
        const std::vector<PipelineOp> ops = one_forward_one_backward(stage, stages, m);
        ASSERT_EQ(static_cast<index_t>(ops.size()), 2 * m);
        index_t next_forward = 0, next_backward = 0, in_flight = 0, most_in_flight = 0;
        for (const PipelineOp& op : ops) {
          if (op.forward) {
            EXPECT_EQ(op.micro_batch, next_forward++);
            most_in_flight = std::max(most_in_flight, ++in_flight);
          } else {
            EXPECT_EQ(op.micro_batch, next_backward++);
            EXPECT_LT(op.micro_batch, next_forward) << "backward before forward";
            --in_flight;
          }
        }
        EXPECT_EQ(most_in_flight, pipeline_slots(stage, stages, m)) << stages << " " << stage << " " << m;
        // Warm-up: pp - stage - 1 forward passes (at most m), then the steady
        // state's first forward (if any is left) before the first backward.
        const index_t warm_up = std::min<index_t>(stages - stage - 1, m);
        const auto first_backward = std::find_if(ops.begin(), ops.end(), [](const PipelineOp& op) { return !op.forward; });
        EXPECT_EQ(first_backward - ops.begin(), warm_up + (warm_up < m ? 1 : 0));
      }
}

// Runs every stage's list of passes with forward time 1 and backward time 2:
// a forward pass waits for the previous stage's forward of the same
// micro-batch, a backward pass for the next stage's backward. Returns the
// step's span; fails if the stages deadlock.
double simulated_span(int stages, index_t m, std::vector<double>& busy) {
  std::vector<std::vector<PipelineOp>> ops;
  for (int s = 0; s < stages; ++s) ops.push_back(one_forward_one_backward(s, stages, m));
  std::vector<std::vector<double>> forward_done(stages, std::vector<double>(m, -1)), backward_done = forward_done;
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  busy.assign(stages, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      const PipelineOp op = ops[s][next[s]];
      const double ready = op.forward ? (s == 0 ? 0.0 : forward_done[s - 1][op.micro_batch])
                                      : (s == stages - 1 ? 0.0 : backward_done[s + 1][op.micro_batch]);
      if (ready < 0) continue;
      const double duration = op.forward ? 1.0 : 2.0;
      clock[s] = std::max(clock[s], ready) + duration;
      busy[s] += duration;
      (op.forward ? forward_done : backward_done)[s][op.micro_batch] = clock[s];
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) EXPECT_EQ(next[s], ops[s].size()) << "stage " << s << " deadlocked";
  return *std::max_element(clock.begin(), clock.end());
}

TEST(PipelineSchedule, IdealBubbleIsTheModel) {
  for (int stages = 1; stages <= 8; ++stages)
    for (index_t m = 1; m <= 16; ++m) {
      std::vector<double> busy;
      const double span = simulated_span(stages, m, busy);
      EXPECT_DOUBLE_EQ(span, 3.0 * static_cast<double>(m + stages - 1)) << stages << " stages, " << m;
      for (double b : busy) EXPECT_NEAR(1.0 - b / span, modelled_bubble_fraction(stages, m), 1e-12);
    }
}

// The interleaved schedule's cases: 2-6 stages, 2-4 chunks, m = pp, 2 pp, 3 pp.
template <class Check>
void for_each_interleaved_case(Check&& check) {
  for (int stages = 2; stages <= 6; ++stages)
    for (int chunks = 2; chunks <= 4; ++chunks)
      for (index_t m = stages; m <= 3 * stages; m += stages) check(stages, chunks, m);
}

TEST(InterleavedSchedule, EveryPairOnceForwardThenBackwardEachChunkInOrder) {
  for_each_interleaved_case([](int stages, int chunks, index_t m) {
    for (int stage = 0; stage < stages; ++stage) {
      const std::vector<PipelineOp> ops = interleaved_one_forward_one_backward(stage, stages, chunks, m);
      ASSERT_EQ(static_cast<index_t>(ops.size()), 2 * m * chunks);
      std::vector<index_t> next_forward(chunks, 0), next_backward(chunks, 0), in_flight(chunks, 0), most(chunks, 0);
      for (const PipelineOp& op : ops) {
        const auto c = static_cast<std::size_t>(op.chunk);
        ASSERT_LT(op.chunk, chunks);
        if (op.forward) {
          EXPECT_EQ(op.micro_batch, next_forward[c]++);
          most[c] = std::max(most[c], ++in_flight[c]);
        } else {
          EXPECT_EQ(op.micro_batch, next_backward[c]++);
          EXPECT_LT(op.micro_batch, next_forward[c]) << "backward before forward";
          --in_flight[c];
        }
      }
      EXPECT_EQ(most, interleaved_slots(stage, stages, chunks, m)) << stages << " " << stage << " " << chunks;
      // Megatron's warm-up: 2 (pp - s - 1) + (v - 1) pp forward passes (where m = pp too), then
      // the steady state's first forward before the first backward.
      const index_t total = m * chunks;
      const index_t warm_up = std::min<index_t>(2 * (stages - stage - 1) + (chunks - 1) * stages, total);
      const auto first_backward = std::find_if(ops.begin(), ops.end(), [](const PipelineOp& op) { return !op.forward; });
      EXPECT_EQ(first_backward - ops.begin(), warm_up + (warm_up < total ? 1 : 0)) << stages << " " << stage;
      // The head keeps one micro-batch's logits: on the last stage the last chunk's backward follows its forward.
      for (std::size_t i = 0; stage == stages - 1 && i < ops.size(); ++i)
        if (ops[i].forward && ops[i].chunk == chunks - 1) {
          ASSERT_LT(i + 1, ops.size());
          EXPECT_TRUE(!ops[i + 1].forward && ops[i + 1].chunk == chunks - 1 &&
                      ops[i + 1].micro_batch == ops[i].micro_batch)
              << stages << " stages, " << chunks << " chunks, m " << m << ", pass " << i;
        }
    }
  });
  for (int stage = 0; stage < 4; ++stage) {
    const auto plain = one_forward_one_backward(stage, 4, 8), one = interleaved_one_forward_one_backward(stage, 4, 1, 8);
    ASSERT_EQ(plain.size(), one.size());
    for (std::size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(plain[i].forward == one[i].forward && plain[i].micro_batch == one[i].micro_batch && one[i].chunk == 0);
  }
}

// The model's virtual stage of a stage's chunk, and the pass a pass waits for:
// a forward for the previous virtual stage's forward of the same micro-batch,
// a backward for the next one's backward (virtual stage c pp + s; the last
// one's backward follows its own forward).
int virtual_stage(int stage, int stages, index_t chunk) { return static_cast<int>(chunk) * stages + stage; }

// Runs every stage's interleaved passes with forward time 1 / v and backward
// time 2 / v a chunk; returns the step's span; fails if the stages deadlock.
double simulated_interleaved_span(int stages, int chunks, index_t m, std::vector<double>& busy) {
  const int virtual_stages = stages * chunks;
  std::vector<std::vector<PipelineOp>> ops;
  for (int s = 0; s < stages; ++s) ops.push_back(interleaved_one_forward_one_backward(s, stages, chunks, m));
  std::vector<std::vector<double>> forward_done(virtual_stages, std::vector<double>(m, -1)), backward_done = forward_done;
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> clock(stages, 0.0);
  busy.assign(stages, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      const PipelineOp op = ops[s][next[s]];
      const int g = virtual_stage(s, stages, op.chunk);
      const double ready = op.forward ? (g == 0 ? 0.0 : forward_done[g - 1][op.micro_batch])
                                      : (g == virtual_stages - 1 ? 0.0 : backward_done[g + 1][op.micro_batch]);
      if (ready < 0) continue;
      const double duration = (op.forward ? 1.0 : 2.0) / chunks;
      clock[s] = std::max(clock[s], ready) + duration;
      busy[s] += duration;
      (op.forward ? forward_done : backward_done)[g][op.micro_batch] = clock[s];
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) EXPECT_EQ(next[s], ops[s].size()) << "stage " << s << " deadlocked";
  return *std::max_element(clock.begin(), clock.end());
}

// The ideal step runs no longer than PTD-P's bound, 3 m + 3 (pp - 1) / v (its bubble (pp - 1)(t_f + t_b) / v),
// so the bubble is at most the model's (pp - 1) / (v m + pp - 1); and it is shorter than 1F1B's.
TEST(InterleavedSchedule, IdealBubbleIsThePtdpBound) {
  for_each_interleaved_case([](int stages, int chunks, index_t m) {
    std::vector<double> busy;
    const double span = simulated_interleaved_span(stages, chunks, m, busy);
    const double bound = 3.0 * static_cast<double>(m) + 3.0 * (stages - 1) / chunks;
    EXPECT_LE(span, bound + 1e-9) << stages << " stages, " << chunks << " chunks, " << m;
    EXPECT_LT(span, 3.0 * static_cast<double>(m + stages - 1)) << stages << " stages, " << chunks << " chunks, " << m;
    for (double b : busy) EXPECT_LE(1.0 - b / span, modelled_bubble_fraction(stages, m, chunks) + 1e-12);
  });
}

// What a stage sends to a neighbour, and what the neighbour receives, in the
// same order (messages between two ranks match in order): activations to the
// next virtual stage, gradients to the previous one.
TEST(InterleavedSchedule, NeighboursExchangeInTheSameOrder) {
  for_each_interleaved_case([](int stages, int chunks, index_t m) {
    const int last = stages * chunks - 1;
    // [kind][from][to]: the (micro-batch, destination virtual stage) sequence.
    std::vector<std::vector<std::vector<std::vector<std::pair<index_t, int>>>>> sent(
        2, std::vector<std::vector<std::vector<std::pair<index_t, int>>>>(
               stages, std::vector<std::vector<std::pair<index_t, int>>>(stages))),
        received = sent;
    for (int s = 0; s < stages; ++s)
      for (const PipelineOp& op : interleaved_one_forward_one_backward(s, stages, chunks, m)) {
        const int g = virtual_stage(s, stages, op.chunk), kind = op.forward ? 0 : 1;
        const int from = op.forward ? g - 1 : g + 1, to = op.forward ? g + 1 : g - 1;
        if (from >= 0 && from <= last) received[kind][from % stages][s].push_back({op.micro_batch, g});
        if (to >= 0 && to <= last) sent[kind][s][to % stages].push_back({op.micro_batch, to});
      }
    EXPECT_EQ(sent, received) << stages << " stages, " << chunks << " chunks, " << m;
  });
}

TEST(StageLayers, ContiguousAndEvenFirstStagesLonger) {
  for (index_t layers = 1; layers <= 12; ++layers)
    for (int stages = 1; stages <= layers; ++stages) {
      index_t next = 0;
      for (int s = 0; s < stages; ++s) {
        const StageLayers l = stage_layers(layers, stages, s);
        EXPECT_EQ(l.first, next);
        EXPECT_GE(l.count(), 1);
        EXPECT_EQ(l.count(), layers / stages + (s < layers % stages ? 1 : 0));
        next = l.end;
      }
      EXPECT_EQ(next, layers);
    }
}

TEST(ParameterLayout, StagesHoldTheirTensorsOnce) {
  ModelConfig m;
  m.vocab = 17;
  m.d_model = 8;
  m.heads = 2;
  m.layers = 5;
  m.seq_len = 6;
  const ParameterLayout whole(m, m.seq_len);
  for (int stages : {2, 3, 5}) {
    index_t held = 0;
    for (int s = 0; s < stages; ++s) {
      const ParameterLayout stage(m, m.seq_len, 1, 0, stages, s);
      const StageLayers l = stage.chunk_layers(0);
      for (const ParameterInfo& p : stage.parameters()) {
        const bool block = p.name.rfind("blocks.", 0) == 0;
        const index_t layer = block ? std::stol(p.name.substr(7)) : -1;
        const bool expected = block ? layer >= l.first && layer < l.end
                              : p.name == "wte" ? s == 0 || s == stages - 1
                              : p.name == "wpe" ? s == 0
                                                : s == stages - 1;  // ln_f
        EXPECT_EQ(p.held, expected) << p.name << " on stage " << s << " of " << stages;
        EXPECT_EQ(p.tied_copy, p.name == "wte" && s == stages - 1) << p.name;
        if (p.held && !p.tied_copy) held += p.local_size;
        if (!p.held) {
          EXPECT_EQ(p.local_size, 0) << p.name;
        }
      }
      EXPECT_EQ(stage.tied_copy_size(), s == stages - 1 ? m.vocab * m.d_model : 0);
    }
    EXPECT_EQ(held, whole.total_global_count()) << stages << " stages";
  }
}

// Interleaved: stage s holds model chunks s, s + pp, ... (Megatron's order),
// every layer is held on exactly one stage, and a stage holds only its chunks' blocks.
TEST(ParameterLayout, InterleavedStagesHoldChunksPpApart) {
  ModelConfig m;
  m.vocab = 11;
  m.d_model = 4;
  m.heads = 2;
  m.layers = 12;
  m.seq_len = 4;
  for (const auto& [stages, chunks] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}, std::pair{2, 6}}) {
    std::vector<int> holders(static_cast<std::size_t>(m.layers), 0);
    for (int s = 0; s < stages; ++s) {
      const ParameterLayout stage(m, m.seq_len, 1, 0, stages, s, chunks);
      ASSERT_EQ(stage.virtual_stages(), chunks);
      for (int c = 0; c < chunks; ++c) {
        const StageLayers l = stage.chunk_layers(c);
        const index_t size = m.layers / (stages * chunks);
        EXPECT_EQ(l.first, (c * stages + s) * size) << "stage " << s << " chunk " << c;
        EXPECT_EQ(l.count(), size);
      }
      for (const ParameterInfo& p : stage.parameters()) {
        if (p.name.rfind("blocks.", 0) != 0) continue;
        const index_t layer = std::stol(p.name.substr(7));
        const bool own = (layer / (m.layers / (stages * chunks))) % stages == s;
        EXPECT_EQ(p.held, own) << p.name << " on stage " << s;
        if (p.held && p.name.find("ln1.weight") != std::string::npos) ++holders[static_cast<std::size_t>(layer)];
      }
    }
    for (int held : holders) EXPECT_EQ(held, 1);
  }
}

}  // namespace
}  // namespace miniattn
