// The training loop: one step (data, forward, backward, gradient exchange,
// non-finite guard, clipping, update), snapshot and checkpoint writes, the log.
#include "driver/training_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "attention/strategy_table.hpp"
#include "comm/agree.hpp"
#include "comm/exchange_watch.hpp"
#include "comm/mpi_ranks.hpp"
#include "core/error.hpp"
#include "driver/training_state.hpp"
#include "io/checkpoint.hpp"
#include "io/parameter_io.hpp"
#include "kernels/layers/elementwise.hpp"
#include "perf/memory_usage.hpp"

namespace miniattn {

namespace {

std::string format_seconds(double s) {
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else std::snprintf(buf, sizeof buf, "%.1fmin", s / 60.0);
  return buf;
}

// The index, in model order, of the first parameter whose gradient holds a
// NaN or Inf on this rank; -1 when none does.
template <class P>
long first_nonfinite_gradient(const ParameterLayout& layout, const ParameterBuffers<P>& grads) {
  const auto& params = layout.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParameterInfo& p = params[i];
    const auto g = Kokkos::subview(grads.buffer_of(p), Kokkos::make_pair(p.offset, p.offset + p.local_size));
    if (kernels::count_nonfinite<P>(g) > 0) return static_cast<long>(i);
  }
  return -1;
}

// The smallest of each rank's ordinal (-1 meaning "none here") and the lowest
// rank holding it, so every rank names the same place in its message.
std::pair<long, int> earliest_on_any_rank(long ordinal, MPI_Comm world) {
  const double none = std::numeric_limits<double>::infinity();  // ordinals are small: exact as doubles
  const LeastOverRanks first = least_over_ranks(ordinal < 0 ? none : static_cast<double>(ordinal), world);
  return {std::isinf(first.value) ? -1 : static_cast<long>(first.value), first.rank};
}

// train.nan_check on the (reduced, hence agreed) loss: names the first stage
// that went non-finite on any rank.
template <class T>
void check_loss(TrainingState<T>& s, double loss, index_t step) {
  if (!s.config.train.nan_check) return;
  auto t = s.timer.measure("nan_check");  // timed so that the bench shows what the guard costs
  if (std::isfinite(loss)) return;
  const auto [stage, on_rank] = earliest_on_any_rank(s.model.first_nonfinite_stage(), s.grid.world);
  throw CollectiveFailure("train.nan_check: the loss is " + std::to_string(loss) + " at step " +
                          std::to_string(step) + "; first non-finite activation: " +
                          (stage < 0 ? std::string("none (the loss itself)")
                                     : s.model.stage_name(stage) + " (rank " + std::to_string(on_rank) + ")"));
}

template <class T>
void check_grad_norm(TrainingState<T>& s, double norm, index_t step) {
  if (!s.config.train.nan_check) return;
  auto t = s.timer.measure("nan_check");
  if (std::isfinite(norm)) return;
  const auto [index, on_rank] = earliest_on_any_rank(first_nonfinite_gradient(s.layout, s.grads), s.grid.world);
  throw CollectiveFailure("train.nan_check: the gradient norm is " + std::to_string(norm) + " at step " +
                          std::to_string(step) + "; first non-finite gradient: " +
                          (index < 0 ? std::string("none (the norm overflowed)")
                                     : s.layout.parameters()[static_cast<std::size_t>(index)].name + " (rank " +
                                           std::to_string(on_rank) + ")"));
}

// The replicated buffer's two parts (ParameterLayout): the tensors whole on
// every rank of the stage, then this rank's tensor-parallel shards.
template <class T>
std::pair<View1<T>, View1<T>> whole_and_shards(const ParameterLayout& layout, const View1<T>& buffer) {
  const index_t split = layout.tensor_parallel_begin(), end = layout.replicated_size();
  return {Kokkos::subview(buffer, Kokkos::make_pair(index_t{0}, split)),
          Kokkos::subview(buffer, Kokkos::make_pair(split, end))};
}

// Sums each gradient over the ranks holding a replica of its parameter:
// tensors whole on every rank of the stage over the stage, tensor-parallel
// shards over the stage's ranks of the same TP index (one buffer with tp = 1),
// wpe rows over the ranks holding the same positions, and the tied wte
// between the first stage (embedding) and the last (head).
// Without TP's sequence parallelism the TP ranks hold the same rows, so their
// gradients of what they hold whole (and of wpe) are equal: summed over the
// ranks of one TP index only (DP x SP; DP for wpe).
template <class T>
void sum_gradients(TrainingState<T>& s) {
  const ProcessGrid& grid = s.grid;
  const bool tp_replicates_rows = grid.tp_size > 1 && !s.config.parallel.tp_sequence_parallel;
  if (grid.tp_size == 1) {
    s.comm->allreduce_sum(s.grads.replicated, grid.stage_comm, Exchange::gradients_replicated);
  } else {
    const auto [whole, shards] = whole_and_shards(s.layout, s.grads.replicated);
    s.comm->allreduce_sum(whole, tp_replicates_rows ? grid.shard_comm : grid.stage_comm,
                          Exchange::gradients_replicated);
    s.comm->allreduce_sum(shards, grid.shard_comm, Exchange::gradients_tensor_parallel);
  }
  const bool wpe = s.layout.holds_embedding() && s.layout.sharded_size() > 0;  // not with rotary positions
  if (wpe)
    s.comm->allreduce_sum(s.grads.sharded, tp_replicates_rows ? grid.dp_comm : grid.position_comm,
                          Exchange::gradients_wpe);
  if (grid.tied_embedding_comm != MPI_COMM_NULL) {
    const index_t wte = s.layout.wte(), size = s.config.model.vocab * s.config.model.d_model;
    s.comm->allreduce_sum(View1<Param<T>>(Kokkos::subview(s.grads.replicated, Kokkos::make_pair(wte, wte + size))),
                          grid.tied_embedding_comm, Exchange::gradients_tied_embedding);
  }
}

// Sum of squares of the gradients of the whole model, the same on every rank
// (each parameter counted once: shards summed over their TP group, wpe rows
// over the SP group, stages over the pipeline; the tied copy of wte left out).
template <class T>
double gradient_sum_of_squares(TrainingState<T>& s) {
  const ProcessGrid& grid = s.grid;
  const auto [whole, shards] = whole_and_shards(s.layout, s.grads.replicated);
  const index_t whole_size = static_cast<index_t>(whole.extent(0));
  const auto counted = Kokkos::subview(whole, Kokkos::make_pair(s.layout.tied_copy_size(), whole_size));
  double shards_sq = s.gradient_sum.template sum_of_squares<Param<T>>(shards);
  if (grid.tp_size > 1) shards_sq = s.comm->allreduce_sum(shards_sq, grid.tp_comm, Exchange::grad_norm);
  double wpe_sq = 0.0;
  if (s.layout.holds_embedding() && s.layout.sharded_size() > 0)  // a layout decision: every rank's the same
    wpe_sq = s.comm->allreduce_sum(s.gradient_sum.template sum_of_squares<Param<T>>(s.grads.sharded), grid.sp_comm,
                                   Exchange::grad_norm);
  const double stage_sq =
      s.gradient_sum.template sum_of_squares<Param<T>>(View1<Param<T>>(counted)) + shards_sq + wpe_sq;
  return grid.pp_size > 1 ? s.comm->allreduce_sum(stage_sq, grid.pp_comm, Exchange::grad_norm) : stage_sq;
}

// Data, the pipeline's forward and backward passes, the gradient all-reduces;
// returns the global mean loss and records the step's pipeline idle fraction.
template <class T>
double loss_and_gradients(TrainingState<T>& s, index_t step, StepRecord& record) {
  const double tokens = static_cast<double>(s.config.model.batch * s.config.model.seq_len);
  {
    auto t = s.timer.measure("data");
    s.task.fill(step, s.share.first_sample, s.share.local_batch, s.positions, s.inputs, s.targets);
    s.grads.fill(Param<T>(0));
  }
  const PipelinePass pass = run_pipeline(s, step);
  record.idle_fractions.push_back(pass.span_seconds > 0 ? 1.0 - pass.busy_seconds / pass.span_seconds : 0.0);
  auto t = s.timer.measure("gradient_exchange");
  sum_gradients(s);
  // Without TP's sequence parallelism each TP rank computed the same rows' loss: TP rank 0's counts.
  const bool counted = s.config.parallel.tp_sequence_parallel || s.grid.tp_rank == 0;
  return s.comm->allreduce_sum(counted ? pass.loss_sum : 0.0, s.grid.world, Exchange::loss) / tokens;
}

// Clips by the global gradient norm and updates the parameters; returns the norm.
template <class T>
double clip_and_update(TrainingState<T>& s, index_t step) {
  auto t = s.timer.measure("optimizer");
  const double norm = std::sqrt(gradient_sum_of_squares(s));
  check_grad_norm(s, norm, step);
  // PyTorch's clip_grad_norm_ rule, + 1e-6 included, so that a PyTorch run
  // with the same deck takes the same steps.
  const double clip = s.config.train.grad_clip;
  s.optimizer.step(s.params, s.grads, clip > 0 ? std::min(1.0, clip / (norm + 1e-6)) : 1.0);
  s.refresh_weights();
  return norm;
}

// A file that cannot be written mid-run (disk full, quota, a vanished
// directory) is a runtime failure: the deck was fine. The writers agree on
// the error, so every rank throws this at the same point.
template <class Write>
void write_or_fail(const char* key, Write&& write) {
  const WatchedRegion region(key);  // HDF5's collective I/O waits inside the library
  try {
    write();
  } catch (const InputError& e) {
    throw CollectiveFailure(std::string(key) + ": " + e.what());
  }
}

template <class T>
void write_snapshot(TrainingState<T>& s, double loss, index_t step) {
  auto t = s.timer.measure("snapshot");
  io::SnapshotContent content;
  content.step = step;
  content.loss = loss;
  content.first_sample = s.share.first_sample;
  content.tokens = s.task.full_streams(step, s.share.first_sample, s.share.local_batch);
  if (s.config.data.documents)
    content.document_ids = s.task.full_documents(step, s.share.first_sample, s.share.local_batch);
  write_or_fail("io.snapshot", [&] {
    io::write_snapshot<Param<T>>(s.config.io.snapshot, s.config, s.layout, s.grid, s.share.positions, s.params,
                                 s.grads, content);
  });
}

template <class T>
void write_checkpoint(TrainingState<T>& s, index_t steps_done) {
  auto t = s.timer.measure("checkpoint");
  const io::CheckpointState state{steps_done, s.optimizer.steps_taken(), s.config.train.seed};
  write_or_fail("io.checkpoint", [&] {
    io::write_checkpoint<Param<T>>(s.config.io.checkpoint, s.config, s.layout, s.grid, s.share.positions, s.params,
                                   s.first_moment(), s.second_moment(), state);
  });
}

void log_step(const Config& c, index_t step, const StepRecord& record, double elapsed) {
  const bool last = step + 1 == c.train.steps;
  if (c.run.mode == RunMode::bench || !((step + 1) % c.run.log_every == 0 || step == 0 || last)) return;
  const double tokens = static_cast<double>(c.model.batch * c.model.seq_len);
  const double per_step = elapsed / static_cast<double>(step + 1 - record.first_step);
  const double eta = per_step * static_cast<double>(c.train.steps - step - 1);
  std::printf("step %6lld/%lld  loss %.6f  grad_norm %.3e  tok/s %.4g  elapsed %s  eta %s\n",
              static_cast<long long>(step), static_cast<long long>(c.train.steps), record.losses.back(),
              record.last_grad_norm, tokens / per_step, format_seconds(elapsed).c_str(), format_seconds(eta).c_str());
  std::fflush(stdout);
}

// One step and the writes due after it; appends to `record`.
template <class T>
void train_step(TrainingState<T>& s, index_t step, const InjectedFault& fault, StepRecord& record) {
  const Config& c = s.config;
  if (fault.rank == s.grid.world_rank && fault.step == step)
    throw RuntimeFailure("injected fault (MINIATTN_FAULT) at step " + std::to_string(step));
  set_exchange_step(step);
  const double start = wall_seconds();
  const double loss = loss_and_gradients(s, step, record);
  check_loss(s, loss, step);
  double seconds = wall_seconds() - start;
  // The snapshot holds this step's gradients and the parameters they were taken at.
  if (!c.io.snapshot.empty() && step == c.io.snapshot_step) write_snapshot(s, loss, step);
  const double update_start = wall_seconds();
  record.last_grad_norm = clip_and_update(s, step);
  seconds += wall_seconds() - update_start;
  record.step_times.push_back(seconds);
  if (record.step_times.size() == 1) s.timer.end_warm_up();
  record.losses.push_back(loss);
  const bool periodic = c.io.checkpoint_every > 0 && (step + 1) % c.io.checkpoint_every == 0;
  if (!c.io.checkpoint.empty() && (periodic || step + 1 == c.train.steps)) write_checkpoint(s, step + 1);
}

}  // namespace

template <class T>
nlohmann::json run_training(const Config& c, MPI_Comm world) {
  StepRecord record;
  record.baseline_resident_bytes = peak_resident_bytes();
  const int world_size = size_of(world);
  const int dp = static_cast<int>(c.parallel.dp), pp = static_cast<int>(c.parallel.pp);
  const int tp = static_cast<int>(c.parallel.tp), sp = static_cast<int>(sp_size(c.parallel, world_size));
  const int ulysses = strategy_record(c.parallel.strategy).ulysses_degree(sp, static_cast<int>(c.parallel.ulysses_degree));
  ProcessGrid grid = ProcessGrid::create(world, dp, pp, tp, ulysses);
  const RankShare share = rank_share(c, grid);
  const ParameterLayout layout(c.model, share.n, grid.tp_size, grid.tp_rank, grid.pp_size, grid.pp_rank,
                               static_cast<int>(c.parallel.virtual_stages));
  const InjectedFault fault = injected_fault(grid.world_rank);
  kernels::AttentionTiles tiles = agreed_attention_tiles<T>(c, grid);
  const ElementSizes sizes = element_sizes(c.model.precision);
  if (sizes.value != sizeof(T) || sizes.acc != sizeof(Acc<T>) || sizes.param != sizeof(Param<T>))
    throw RuntimeFailure("run_training: model.precision " + std::string(to_string(c.model.precision)) +
                         " does not match the types it was dispatched to");
  const MemoryCheck memory = check_memory(c, grid, layout, tiles.blocking, fault);
  tiles.blocking = memory.blocking;

  TrainingState<T> state(c, grid, share, layout, tiles, memory.plan.recompute);
  record.first_step = load_or_initialize(state);
  const double start = wall_seconds();
  for (index_t step = record.first_step; step < c.train.steps; ++step) {
    train_step(state, step, fault, record);
    if (grid.world_rank == 0) log_step(c, step, record, wall_seconds() - start);
  }
  record.total_seconds = wall_seconds() - start;
  nlohmann::json result = training_report(state, memory, record, world);
  grid.free();
  return result;
}

template nlohmann::json run_training<float>(const Config&, MPI_Comm);
template nlohmann::json run_training<double>(const Config&, MPI_Comm);
template nlohmann::json run_training<bf16>(const Config&, MPI_Comm);

}  // namespace miniattn
