// The RESULT object of a training or bench run: what ran, how fast, what was
// exchanged (measured and modelled), memory, losses; the bench's rates
// against this machine's own GEMM.

#include <numeric>

#include "comm/agree.hpp"
#include "comm/mpi_ranks.hpp"
#include "comm/watched_mpi.hpp"
#include "core/config_json.hpp"
#include "driver/ring_overlap.hpp"
#include "driver/training_state.hpp"
#include "attention/strategy_record.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "kernels/base/onednn_gemm.hpp"
#include "kernels/base/simd_bf16_dot.hpp"
#include "kernels/attention/kernel_record.hpp"
#include "model/pipeline_schedule.hpp"
#include "perf/exchange_model.hpp"
#include "perf/flop_count.hpp"
#include "perf/gemm_rate.hpp"
#include "perf/memory_usage.hpp"

namespace miniattn {

namespace {

// {min, max, mean} of a value over the ranks of comm.
nlohmann::json spread_over_ranks(double value, MPI_Comm comm) {
  const int size = size_of(comm);
  double min = 0, max = 0, sum = 0;
  watched_allreduce(&value, &min, 1, MPI_DOUBLE, MPI_MIN, comm, "report.spread");
  watched_allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, comm, "report.spread");
  watched_allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm, "report.spread");
  return {{"min", min}, {"max", max}, {"mean", sum / size}};
}

// Bytes per step by Comm label: measured by the Comm counters and modelled
// from the sizes (this rank's; ranks of different pipeline stages differ);
// adds the totals and whether every rank's match to `result`.
template <class T>
nlohmann::json exchange_table(const TrainingState<T>& s, double step_count, nlohmann::json& result) {
  ExchangeModelInput in;
  static_cast<Decomposition&>(in) = decomposition_of(s.config, s.grid);
  in.model = s.config.model;
  in.stage = s.grid.pp_rank;
  in.replicated_parameters = s.layout.replicated_size();
  in.tensor_parallel_parameters = s.layout.replicated_size() - s.layout.tensor_parallel_begin();
  in.local_wpe_parameters = s.layout.sharded_size();
  const std::map<Exchange, double> modelled = modelled_exchange_bytes(in);
  nlohmann::json table = nlohmann::json::object();
  double measured_total = 0.0, modelled_total = 0.0, seconds = 0.0;
  bool holds = true;  // every label: measured == modelled on this rank
  for (const auto& [label, stats] : s.comm->stats()) {
    const double per_step = static_cast<double>(stats.bytes_sent) / step_count;
    const auto model_it = modelled.find(label);
    holds = holds && per_step == (model_it == modelled.end() ? 0.0 : model_it->second);
    table[to_string(label)] = {{"bytes_per_step", per_step},
                    {"bytes_per_step_model", model_it == modelled.end() ? 0.0 : model_it->second},
                    {"calls", stats.calls},
                    {"seconds", stats.seconds}};
    measured_total += per_step;
    seconds += stats.seconds;
  }
  for (const auto& [label, bytes] : modelled) {
    modelled_total += bytes;
    if (!table.contains(to_string(label))) {
      table[to_string(label)] = {{"bytes_per_step", 0.0}, {"bytes_per_step_model", bytes}};
      holds = holds && bytes == 0.0;
    }
  }
  result["exchange_model_holds_on_every_rank"] = all_ranks(holds, s.grid.world);
  result["exchange_seconds_per_step"] = seconds / step_count;
  result["exchange_bytes_per_step_measured"] = measured_total;
  result["exchange_bytes_per_step_model"] = modelled_total;
  return table;
}

// How evenly the layout spreads the (causal) attention work: this rank's
// attention seconds (forward + backward) per layer and step, less the time it
// waited inside the attention's own exchanges (a rank with less work waits
// there for the others).
template <class T>
double attention_busy_seconds(const TrainingState<T>& s) {
  double waited = 0;
  for (const auto& [label, stats] : s.comm->stats())
    if (attention_exchange(label)) waited += stats.seconds;
  const auto calls = s.timer.samples().find("attention_forward");
  if (calls == s.timer.samples().end() || calls->second.empty()) return 0.0;
  const double total = s.timer.total("attention_forward") + s.timer.total("attention_backward");
  return (total - waited) / static_cast<double>(calls->second.size());
}

// run.mode bench: each phase's rate per rank against this machine's own GEMM
// rate, measured now with the same scalar type; the ring's hidden fraction.
template <class T>
nlohmann::json bench_section(TrainingState<T>& s, double step_median, double step_count) {
  const ModelConfig& m = s.config.model;
  const double ranks = s.grid.world_size;
  const double gemm_rate = measure_gemm_flops<T>();
  const CorePeak peak = core_peak(sizeof(Acc<T>));  // bf16 computes in fp32
  auto rate_of = [&](double seconds, double flops) {
    const double rate = seconds > 0 ? flops / ranks / seconds : 0.0;
    nlohmann::json j{{"seconds", seconds}, {"gflops_per_rank", rate * 1e-9}, {"fraction_of_gemm", rate / gemm_rate}};
    if (peak.known) j["fraction_of_peak"] = rate / peak.flops();
    return j;
  };
  const FlopCount flops = training_step_flops(m);
  const AttentionFlops attention = attention_flops(m);
  const double layers = static_cast<double>(m.layers);
  const BlasInfo blas = blas_info();
  nlohmann::json b;
  b["gemm_gflops_per_rank"] = gemm_rate * 1e-9;
  if (peak.known) {
    b["core_peak"] = {{"gflops_per_rank", peak.flops() * 1e-9},
                      {"clock_ghz", peak.clock_hz * 1e-9},
                      {"flops_per_cycle_per_core", peak.flops_per_cycle},
                      {"cores", peak.cores},
                      {"assumption", peak.assumption}};
    b["gemm_fraction_of_peak"] = gemm_rate / peak.flops();
  }
  b["blas"] = {{"library", blas.library}, {"core", blas.core}, {"core_chosen_by", blas.core_chosen_by},
               {"threads", blas.threads}, {"warning", blas.warning}};
  b["step"] = rate_of(step_median, flops.total());
  // Per step: the passes of all micro-batches (this rank's stage).
  b["forward"] = rate_of(s.timer.total("forward") / step_count, flops.forward);
  b["backward"] = rate_of(s.timer.total("backward") / step_count, flops.backward);
  b["attention_forward"] = rate_of(s.timer.median("attention_forward"), attention.forward / layers);
  b["attention_backward"] = rate_of(s.timer.median("attention_backward"), attention.backward / layers);
  nlohmann::json balance = spread_over_ranks(attention_busy_seconds(s), s.grid.world);
  const double mean_busy = balance["mean"].get<double>();
  balance["max_over_mean"] = mean_busy > 0 ? balance["max"].get<double>() / mean_busy : 0.0;
  b["attention_busy_seconds_over_ranks"] = balance;
  const double nan_check_per_step = s.timer.total("nan_check") / step_count;
  b["nan_check"] = {{"seconds_per_step", nan_check_per_step},
                    {"fraction_of_step", step_median > 0 ? nan_check_per_step / step_median : 0.0}};
  b["figure_of_merit_tokens_per_second_per_rank"] =
      step_median > 0 ? static_cast<double>(m.batch * m.seq_len) / step_median / ranks : 0.0;
  const RingOverlap overlap =
      measure_ring_overlap(s.config, s.grid, *s.comm, sizeof(T), s.share.rows() * m.d_model, step_count);
  if (overlap.measured) {
    b["ring_overlap"] = {{"exchange_alone_seconds_per_step", overlap.alone_seconds},
                         {"exchange_exposed_seconds_per_step", overlap.exposed_seconds},
                         {"hidden_fraction", overlap.hidden_fraction()}};
  }
  return b;
}

// Which backward ran: only cudnn's may be non-deterministic.
const char* backward_words(const kernels::AttentionBlocking& blocking) {
  if (blocking.kernel != AttentionKernel::cudnn) return "deterministic";
  return blocking.deterministic ? "deterministic (cuDNN's deterministic algorithm)"
                                : "non-deterministic (cuDNN's default: dQ summed with atomics)";
}

// Rank 0's plan and allocation (pipeline stages differ), the most any rank
// allocated, and whether every rank allocated what it planned; on a GPU also
// what the device's own count of free memory lost since the plan (cuDNN's and
// cuBLAS's handles, NCCL's buffers and the allocator's rounding beside the Views).
nlohmann::json memory_section(const MemoryCheck& memory, std::size_t allocated, std::size_t baseline_resident,
                              MPI_Comm world) {
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [name, bytes] : memory.plan.parts) parts[to_string(name)] = bytes;
  nlohmann::json section = {
      {"planned_bytes_per_rank", memory.plan.total()},
      {"planned_parts", parts},
      {"recompute", memory.plan.recompute},
      {"allocated_bytes_per_rank", allocated},
      {"allocated_bytes_most_of_any_rank", spread_over_ranks(static_cast<double>(allocated), world)["max"]},
      {"plan_holds_on_every_rank", all_ranks(memory.plan.total() == allocated, world)},
      {"baseline_resident_bytes", baseline_resident},
      {"available_bytes_per_rank", memory.available.bytes}};
  if (memory.device_free_bytes > 0) {
    const double used = static_cast<double>(memory.device_free_bytes) - static_cast<double>(device_free_bytes());
    section["device_bytes_used_since_plan"] = used;
    section["device_used_over_plan"] = used / static_cast<double>(memory.plan.total());
  }
  return section;
}

// The pipeline: stages, their layers (each stage's chunks, [first, end) each),
// micro-batches in flight, and the bubble: each rank's idle time over the
// span of its passes (median over the steps after the first), against the
// ideal schedule's (pp - 1) / (v m + pp - 1).
template <class T>
nlohmann::json pipeline_section(const TrainingState<T>& s, const StepRecord& record, MPI_Comm world) {
  const ProcessGrid& grid = s.grid;
  const index_t m = s.share.micro_batches;
  const int v = s.layout.virtual_stages();
  nlohmann::json layers = nlohmann::json::array();
  for (int stage = 0; stage < grid.pp_size; ++stage) {
    nlohmann::json chunks = nlohmann::json::array();
    for (int chunk = 0; chunk < v; ++chunk) {
      const StageLayers l = chunk_layers(s.config.model.layers, grid.pp_size, v, stage, chunk);
      chunks.push_back({l.first, l.end});
    }
    layers.push_back(v == 1 ? chunks[0] : chunks);
  }
  const auto& idle = record.idle_fractions;
  const double idle_median = median(std::vector<double>(idle.begin() + (idle.size() > 1 ? 1 : 0), idle.end()));
  return {{"stages", grid.pp_size},
          {"virtual_stages", v},
          {"schedule", v == 1 ? "1F1B" : "interleaved 1F1B"},
          {"micro_batches", m},
          {"stage_layers", layers},
          {"slots_first_stage", pipeline_slots(0, grid.pp_size, m, v)},
          {"bubble_fraction_measured", spread_over_ranks(idle_median, world)},
          {"bubble_fraction_model", modelled_bubble_fraction(grid.pp_size, m, v)}};
}

// The attention kernel that ran, its tiles and, for cudnn, its calls.
nlohmann::json attention_tiles_section(const kernels::AttentionTiles& tiles, const Config& c) {
  const bool chosen_by_auto = c.kernels.attention == AttentionKernel::automatic;
  nlohmann::json t = {{"kernel", to_string(tiles.blocking.kernel)},
                      {"chosen_by", chosen_by_auto ? "auto" : "deck"},
                      {"chunk", tiles.blocking.chunk},
                      {"query_block", tiles.blocking.query_block},
                      {"key_block", tiles.blocking.key_block},
                      {"forward_scratch_bytes", tiles.forward_scratch_bytes},
                      {"backward_scratch_bytes", tiles.backward_scratch_bytes},
                      {"scratch_level", tiles.scratch_level},
                      {"level0_bytes", tiles.level0_bytes}};
  if (chosen_by_auto) t["auto_grounds"] = kernels::attention_kernel_record(tiles.blocking.kernel).auto_grounds;
  if (tiles.blocking.kernel == AttentionKernel::fused && c.model.precision == Precision::bf16)
    t["bf16_products"] = kernels::simd::to_string(kernels::simd::bf16_dot_path());
  if (tiles.blocking.kernel == AttentionKernel::cudnn) {
    const kernels::CudnnTally tally = kernels::cudnn_tally();
    t["cudnn"] = {{"version", kernels::cudnn_version()},
                  {"backward", backward_words(tiles.blocking)},
                  {"documents", !c.data.documents                    ? "none"
                                : tiles.blocking.cudnn_document_calls ? "calls"
                                                                      : "gemm"},
                  {"query_rows_per_call", tiles.blocking.cudnn_rows_per_call},
                  {"graphs_built", tally.graphs},
                  {"workspace_planned_bytes", tally.workspace_planned_bytes},
                  {"workspace_needed_bytes", tally.workspace_needed_bytes},
                  {"workspace_bytes", tally.workspace_bytes},
                  {"blocks", tally.blocks},
                  {"calls", tally.calls},
                  {"cut_calls", tally.cut_calls},
                  {"blocks_on_gemm_fallback", tally.fallback_blocks}};
  }
  t["backward"] = backward_words(tiles.blocking);
  return t;
}

}  // namespace

template <class T>
nlohmann::json training_report(TrainingState<T>& s, const MemoryCheck& memory, const StepRecord& record,
                               MPI_Comm world) {
  const Config& c = s.config;
  const ModelConfig& m = c.model;
  const double step_count = static_cast<double>(c.train.steps - record.first_step);
  const double tokens_per_step = static_cast<double>(m.batch * m.seq_len);
  // Step time: median over steps after the first (warm-up) when there are more;
  // also their mean, which predict's expected step matches where the work
  // changes from step to step (packed documents).
  const std::vector<double> timed(record.step_times.begin() + (record.step_times.size() > 1 ? 1 : 0),
                                  record.step_times.end());
  const double step_median = median(timed);
  const double step_mean = timed.empty() ? 0.0 : std::accumulate(timed.begin(), timed.end(), 0.0) / timed.size();
  const double tokens_per_second = step_median > 0 ? tokens_per_step / step_median : 0.0;
  const FlopCount flops = training_step_flops(m);
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [phase, samples] : s.timer.samples())
    phases[phase] = {{"median_s", s.timer.median(phase)}, {"total_s", s.timer.total(phase)}, {"calls", samples.size()}};

  nlohmann::json r;
  r["program"] = "miniattn";
  r["mode"] = to_string(c.run.mode);
  r["config"] = config_to_json(c);
  r["config"]["run"]["flight_record"] = flight_record_folder(c.run);  // where a passed deadline writes it
  r["ranks"] = s.grid.world_size;
  r["dp"] = s.grid.dp_size;
  r["tp"] = s.grid.tp_size;
  r["tp_sequence_parallel"] = c.parallel.tp_sequence_parallel;
  r["pp"] = s.grid.pp_size;
  r["sp"] = s.grid.sp_size;
  r["ulysses_degree"] = s.grid.ulysses_size;
  r["strategy"] = to_string(c.parallel.strategy);
  r["comm"] = s.comm->backend();
  r["comm_staged_through_host"] = s.comm->stages_through_host();
  r["execution_space"] = {
      {"name", ExecSpace::name()}, {"concurrency", ExecSpace().concurrency()}, {"kokkos_version", KOKKOS_VERSION}};
  r["attention_tiles"] = attention_tiles_section(s.attention_tiles, c);
  r["precision"] = to_string(m.precision);
  if (std::is_same<T, bf16>::value && kHostExecution) {
    r["host_bf16_gemm"] = kernels::host_bf16_gemm_path();
    r["host_bf16_dot"] = kernels::simd::to_string(kernels::simd::bf16_dot_path());  // the fused kernel's products
  }
  r["steps"] = c.train.steps;
  r["first_step"] = record.first_step;
  r["parameters"] = s.layout.total_global_count();
  r["phases"] = phases;
  r["step_seconds_median"] = step_median;
  r["step_seconds_mean"] = step_mean;
  r["total_seconds"] = record.total_seconds;
  r["tokens_per_second"] = tokens_per_second;
  r["tokens_per_second_per_rank"] = tokens_per_second / s.grid.world_size;
  r["flops_per_step"] = {{"forward", flops.forward}, {"backward", flops.backward}, {"total", flops.total()}};
  r["achieved_flops_per_second"] = step_median > 0 ? flops.total() / step_median : 0.0;
  r["exchange"] = exchange_table(s, step_count, r);
  r["memory"] = memory_section(memory, s.allocated_bytes(), record.baseline_resident_bytes, world);
  r["pipeline"] = pipeline_section(s, record, world);
  r["peak_memory_bytes_per_rank"] = spread_over_ranks(static_cast<double>(peak_resident_bytes()), world);
  r["losses"] = record.losses;
  r["initial_loss"] = record.losses.empty() ? 0.0 : record.losses.front();
  r["final_loss"] = record.losses.empty() ? 0.0 : record.losses.back();
  r["final_grad_norm"] = record.last_grad_norm;
  if (c.run.mode == RunMode::bench) r["bench"] = bench_section(s, step_median, step_count);
  return r;
}

template nlohmann::json training_report<float>(TrainingState<float>&, const MemoryCheck&, const StepRecord&, MPI_Comm);
template nlohmann::json training_report<double>(TrainingState<double>&, const MemoryCheck&, const StepRecord&,
                                                MPI_Comm);
template nlohmann::json training_report<bf16>(TrainingState<bf16>&, const MemoryCheck&, const StepRecord&, MPI_Comm);

}  // namespace miniattn
