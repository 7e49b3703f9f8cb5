#pragma once
// What one rank holds during a training (or bench) run, and the pieces of
// run_training that build it (training_setup.cpp) and report on it
// (training_report.cpp). run_training (training_run.cpp) reads top to bottom:
// share, memory check, state, first step, the steps, the report.
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "driver/attention_factory.hpp"
#include "kernels/base/ordered_sum.hpp"
#include "model/optimizer.hpp"
#include "model/parameters.hpp"
#include "model/synthetic_task.hpp"
#include "model/transformer.hpp"
#include "perf/memory_plan.hpp"
#include "core/phase_timer.hpp"

namespace miniattn {

// This rank's share of the data: samples of its DP group, positions of its
// SP rank; the samples go through the model in micro-batches.
struct RankShare {
  std::vector<index_t> positions;  // global positions, in local order
  index_t n = 0;                   // positions.size()
  index_t local_batch = 0;
  index_t first_sample = 0;
  index_t micro_batches = 1;
  index_t micro_batch = 0;  // samples per micro-batch
  std::vector<index_t> chunk_slots{1};  // micro-batches each model chunk of this stage holds at once
  index_t rows() const { return local_batch * n; }
  // Of all chunks: pipeline_slots.
  index_t slots() const { return std::accumulate(chunk_slots.begin(), chunk_slots.end(), index_t{0}); }
  index_t micro_batch_rows() const { return micro_batch * n; }
};
RankShare rank_share(const Config& c, const ProcessGrid& grid);

// Fault injection for the no-hang tests: MINIATTN_FAULT="rank=R,step=S" makes
// world rank R fail at the start of step S, as a failed allocation would;
// "rank=R,memory_gib=G" makes rank R see G GiB available per rank, as a node
// with less memory would; "rank=R,file_limit_kib=K" limits the size of every
// file rank R writes from then on, as a full disk would;
// "rank=R,skip_exchange=LABEL#N" makes rank R skip its N-th post (from 0) of
// the exchange LABEL, as a rank on another code path would.
struct InjectedFault {
  int rank = -1;
  index_t step = -1;
  double memory_gib = -1.0;
  long file_limit_kib = -1;
  std::string skip_label;
  index_t skip_index = -1;
};
// Reads MINIATTN_FAULT and applies its file size limit on this rank.
InjectedFault injected_fault(int world_rank);

// The memory one rank may use, agreed by every rank: the smallest of the
// ranks' own figures (nodes differ; 0, unknown, counts as no limit), and the
// lowest rank that has it.
struct AgreedMemory {
  std::size_t bytes = 0;  // 0: unknown everywhere
  int rank = 0;
};

struct MemoryCheck {
  MemoryPlan plan;
  AgreedMemory available;
  kernels::AttentionBlocking blocking;  // the run's, with the cudnn kernel's cut chosen (the same on every rank)
  std::size_t device_free_bytes = 0;    // this rank's GPU's free memory when planned (0: host memory)
};

// Agrees on what is available, plans this rank's memory within it (the
// cudnn kernel's calls cut to fit: plan_memory_within), prints the run's
// header on world rank 0 and refuses (InputError, the same on every rank) a
// run that does not fit, before any large allocation.
MemoryCheck check_memory(const Config& c, const ProcessGrid& grid, const ParameterLayout& layout,
                         const kernels::AttentionBlocking& blocking,
                         const InjectedFault& fault);

// The attention kernel and tiles of this run (kernels::choose_attention_tiles),
// agreed over the world so that a refusal ends every rank.
template <class T>
kernels::AttentionTiles agreed_attention_tiles(const Config& c, const ProcessGrid& grid);

// Everything a step touches, built in dependency order. T is the
// activations' storage (fp32, fp64 or bf16); the master parameters, their
// gradients and the optimizer state are Param<T> (fp32 for bf16), and the
// model computes with `weights`: the parameters themselves, or (bf16) their
// copy rounded to T after every update (Megatron's mixed precision).
template <class T>
struct TrainingState {
  // recompute: the memory plan's (MemoryPlan::recompute, agreed by check_memory).
  TrainingState(const Config& c, const ProcessGrid& grid, const RankShare& share, const ParameterLayout& layout,
                const kernels::AttentionTiles& tiles, bool recompute);

  const Config& config;
  const ProcessGrid& grid;
  const RankShare& share;
  const ParameterLayout& layout;
  View1<index_t> positions;  // share.positions on the device
  ParameterBuffers<Param<T>> params, grads;
  ParameterBuffers<T> weights;
  Optimizer<Param<T>> optimizer;
  kernels::OrderedSum gradient_sum;
  kernels::AttentionTiles attention_tiles;
  std::unique_ptr<Comm> comm;
  View2<index_t> attention_positions;
  Transformer<T> model;
  View1<index_t> inputs, targets;  // all micro-batches of the step, one after the other
  // With packed documents, the document ids [micro_batch, N] of the
  // micro-batch each slot holds, from its forward pass to its backward pass.
  std::vector<View2<index_t>> document_ids;
  View2<T> pipeline_send;  // the input gradient in flight to the previous stage (none from the model's first chunk)
  SyntheticTask task;
  PhaseTimer timer;

  // Adam's moments for the checkpoint (null for SGD).
  const ParameterBuffers<Param<T>>* first_moment() const;
  const ParameterBuffers<Param<T>>* second_moment() const;
  // weights = params rounded to T (nothing when they are the same buffers).
  void refresh_weights() const;
  // Bytes the objects above allocated (the memory plan must match it).
  std::size_t allocated_bytes() const;
};

// One step's forward and backward passes over this rank's micro-batches, in
// the 1F1B order (pipeline_schedule.hpp), exchanging activations and their
// gradients with the neighbouring stages (pipeline_step.cpp).
struct PipelinePass {
  double loss_sum = 0.0;      // on the last stage: the cross-entropy summed over this rank's rows
  double busy_seconds = 0.0;  // in the stage's forward and backward passes
  double span_seconds = 0.0;  // of the whole pipeline: from its first pass to its last send
};
template <class T>
PipelinePass run_pipeline(TrainingState<T>& s, index_t step);

// Reads io.restart or io.init, or initialises at random; returns the first step.
template <class T>
index_t load_or_initialize(TrainingState<T>& s);

// What the steps produced, for the report.
struct StepRecord {
  index_t first_step = 0;
  std::vector<double> losses;      // every step's loss, to compare loss curves between decompositions
  std::vector<double> step_times;  // every step's seconds without snapshot or checkpoint writing
  std::vector<double> idle_fractions;  // every step's pipeline idle time over its span (pipeline bubble)
  double total_seconds = 0.0;
  double last_grad_norm = 0.0;
  std::size_t baseline_resident_bytes = 0;  // before the run allocated anything
};

// The RESULT object (and, for run.mode bench, its "bench" part). Collective.
template <class T>
nlohmann::json training_report(TrainingState<T>& s, const MemoryCheck& memory, const StepRecord& record,
                               MPI_Comm world);

}  // namespace miniattn
