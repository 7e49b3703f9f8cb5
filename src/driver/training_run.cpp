#include "driver/training_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config_json.hpp"
#include "core/error.hpp"
#include "driver/attention_factory.hpp"
#include "driver/ring_overlap.hpp"
#include "io/checkpoint.hpp"
#include "io/parameter_io.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/ordered_sum.hpp"
#include "model/optimizer.hpp"
#include "model/parameters.hpp"
#include "model/synthetic_task.hpp"
#include "model/transformer.hpp"
#include "perf/exchange_model.hpp"
#include "perf/flop_count.hpp"
#include "perf/gemm_rate.hpp"
#include "perf/memory_plan.hpp"
#include "perf/memory_usage.hpp"
#include "perf/phase_timer.hpp"

namespace miniattn {

namespace {

std::string format_seconds(double s) {
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else std::snprintf(buf, sizeof buf, "%.1fmin", s / 60.0);
  return buf;
}

struct RankSpread {
  double min = 0, max = 0, mean = 0;
};

RankSpread spread_over_ranks(double value, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  RankSpread r;
  MPI_Allreduce(&value, &r.min, 1, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(&value, &r.max, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(&value, &r.mean, 1, MPI_DOUBLE, MPI_SUM, comm);
  r.mean /= size;
  return r;
}

nlohmann::json to_json(const RankSpread& r) { return {{"min", r.min}, {"max", r.max}, {"mean", r.mean}}; }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int ranks_on_this_node(MPI_Comm world) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int size = 1;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size;
}

View1<index_t> to_device(const std::vector<index_t>& values, const std::string& label) {
  View1<index_t> view(label, values.size());
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(view, host);
  return view;
}

// The memory one rank may use, agreed by every rank: the smallest of the
// ranks' own figures (nodes may differ; 0, unknown, counts as no limit), and
// the lowest rank that has it.
struct AgreedMemory {
  std::size_t bytes = 0;  // 0: unknown everywhere
  int rank = 0;
};

AgreedMemory agreed_available_memory(std::size_t local, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  struct {
    double value;
    int rank;
  } mine{local == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(local), rank}, least{};
  MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE_INT, MPI_MINLOC, world);
  if (std::isinf(least.value)) return {};
  return {static_cast<std::size_t>(least.value), least.rank};
}

// Refuses, before any large allocation, a run whose plan does not fit. The
// same decision on every rank: `available` was agreed.
void check_memory_plan(const Config& c, const MemoryPlan& plan, const AgreedMemory& available, int ranks_on_node) {
  if (available.bytes == 0 || plan.total() <= available.bytes) return;
  std::string parts;
  for (const auto& [name, bytes] : plan.parts) parts += " " + name + " " + format_bytes(static_cast<double>(bytes)) + ";";
  const std::string amount = format_bytes(static_cast<double>(available.bytes));
  const std::string where = c.run.memory_per_rank_gib > 0
                                ? "run.memory_per_rank_gib allows " + amount
                                : amount + " are available per rank on rank " + std::to_string(available.rank) +
                                      "'s node (the least of all ranks; " + std::to_string(ranks_on_node) +
                                      " ranks share rank 0's node)";
  throw InputError("model.seq_len: this run needs " + format_bytes(static_cast<double>(plan.total())) +
                   " per rank (" + parts.substr(1) + ") but " + where +
                   "; use more ranks, a shorter sequence or a smaller batch, or set run.memory_per_rank_gib");
}

// The index, in model order, of the first parameter whose gradient holds a
// NaN or Inf on this rank; -1 when none does.
template <class T>
long first_nonfinite_gradient(const ParameterLayout& layout, const ParameterBuffers<T>& grads) {
  const auto& params = layout.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParameterInfo& p = params[i];
    const auto g = Kokkos::subview(grads.buffer_of(p), Kokkos::make_pair(p.offset, p.offset + p.local_size));
    if (kernels::count_nonfinite<T>(g) > 0) return static_cast<long>(i);
  }
  return -1;
}

// The smallest of each rank's ordinal (-1 meaning "none here") and the lowest
// rank holding it, so every rank names the same place in its message.
std::pair<long, int> earliest_on_any_rank(long ordinal, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  struct {
    long value;
    int rank;
  } mine{ordinal < 0 ? std::numeric_limits<long>::max() : ordinal, rank}, first{};
  MPI_Allreduce(&mine, &first, 1, MPI_LONG_INT, MPI_MINLOC, world);
  return {first.value == std::numeric_limits<long>::max() ? -1 : first.value, first.rank};
}

// Fault injection for the no-hang tests: MINIATTN_FAULT="rank=R,step=S" makes
// world rank R fail at the start of step S, as a failed allocation would;
// "rank=R,memory_gib=G" makes rank R see G GiB available per rank, as a node
// with less memory would.
struct InjectedFault {
  int rank = -1;
  index_t step = -1;
  double memory_gib = -1.0;
};

InjectedFault injected_fault() {
  InjectedFault fault;
  if (const char* text = std::getenv("MINIATTN_FAULT")) {
    long rank = -1, step = -1;
    double gib = -1.0;
    if (std::sscanf(text, "rank=%ld,step=%ld", &rank, &step) == 2) {
      fault.rank = static_cast<int>(rank);
      fault.step = step;
    } else if (std::sscanf(text, "rank=%ld,memory_gib=%lf", &rank, &gib) == 2) {
      fault.rank = static_cast<int>(rank);
      fault.memory_gib = gib;
    }
  }
  return fault;
}

}  // namespace

template <class T>
nlohmann::json run_training(const Config& c, MPI_Comm world) {
  const ModelConfig& m = c.model;
  const std::size_t baseline_resident = peak_resident_bytes();
  int world_size = 1;
  MPI_Comm_size(world, &world_size);
  const int sp_size = world_size / static_cast<int>(c.parallel.dp);
  ProcessGrid grid =
      ProcessGrid::create(world, static_cast<int>(c.parallel.dp), ulysses_degree_for(c.parallel, sp_size));
  const bool root = grid.world_rank == 0;
  const bool bench = c.run.mode == RunMode::bench;

  // This rank's share: samples of its DP group, positions of its SP rank.
  const std::vector<index_t> positions = owned_positions(m.seq_len, grid.sp_size, grid.sp_rank, c.parallel.layout);
  const index_t n = static_cast<index_t>(positions.size());
  const index_t local_batch = m.batch / grid.dp_size;
  const index_t first_sample = grid.dp_rank * local_batch;
  const index_t rows = local_batch * n;
  const ParameterLayout layout(m, n);

  MemoryPlanInput plan_input;
  plan_input.model = m;
  plan_input.strategy = c.parallel.strategy;
  plan_input.optimizer = c.train.optimizer;
  plan_input.dp = grid.dp_size;
  plan_input.sp = grid.sp_size;
  plan_input.ulysses = grid.ulysses_size;
  plan_input.scalar_bytes = sizeof(T);
  plan_input.replicated_parameters = layout.replicated_size();
  const MemoryPlan plan = plan_memory(plan_input);
  const int node_ranks = ranks_on_this_node(world);
  const InjectedFault fault = injected_fault();
  const double memory_gib = fault.rank == grid.world_rank && fault.memory_gib >= 0 ? fault.memory_gib
                                                                                   : c.run.memory_per_rank_gib;
  const AgreedMemory available =
      agreed_available_memory(memory_available_per_rank(memory_gib, node_ranks), grid.world);
  if (root) {
    std::printf("miniattn: %s, %s, %d ranks (dp %d x sp %d), strategy %s, %lld parameters\n", to_string(c.run.mode),
                to_string(m.precision), grid.world_size, grid.dp_size, grid.sp_size, to_string(c.parallel.strategy),
                static_cast<long long>(layout.total_global_count()));
    std::printf("miniattn: model V=%lld D=%lld H=%lld F=%lld L=%lld N=%lld B=%lld %s; planned memory per rank %s "
                "(available %s)\n",
                static_cast<long long>(m.vocab), static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
                static_cast<long long>(m.ffn_width()), static_cast<long long>(m.layers),
                static_cast<long long>(m.seq_len), static_cast<long long>(m.batch),
                m.causal ? "causal" : "non-causal", format_bytes(static_cast<double>(plan.total())).c_str(),
                available.bytes ? format_bytes(static_cast<double>(available.bytes)).c_str() : "not checked");
    std::fflush(stdout);
  }
  check_memory_plan(c, plan, available, node_ranks);

  const View1<index_t> positions_device = to_device(positions, "positions");
  ParameterBuffers<T> params(layout, "params"), grads(layout, "grads");
  Optimizer<T> optimizer(c.train, layout);
  const kernels::OrderedSum gradient_sum(std::max(layout.replicated_size(), layout.sharded_size()));
  const bool adamw = c.train.optimizer == OptimizerKind::adamw;
  const ParameterBuffers<T>* adam_m = adamw ? &optimizer.first_moment() : nullptr;
  const ParameterBuffers<T>* adam_v = adamw ? &optimizer.second_moment() : nullptr;
  index_t first_step = 0;
  if (!c.io.restart.empty()) {
    io::CheckpointState state;
    try {
      state = io::read_checkpoint<T>(c.io.restart, c, layout, grid, positions, params, adam_m, adam_v);
    } catch (const InputError& e) {
      throw InputError(std::string("io.restart: ") + e.what());
    }
    if (state.seed != c.train.seed)
      throw InputError("io.restart: " + c.io.restart + " was written with train.seed " + std::to_string(state.seed) +
                       ", the deck says " + std::to_string(c.train.seed));
    if (state.step >= c.train.steps)
      throw InputError("train.steps: " + c.io.restart + " is at step " + std::to_string(state.step) +
                       "; train.steps (the total, counted from step 0) must be larger to continue");
    optimizer.set_steps_taken(state.optimizer_steps);
    first_step = state.step;
  } else if (c.io.init == "random") {
    initialize_parameters<T>(layout, c.train.seed, positions_device, m.d_model, params);
  } else {
    try {
      io::load_parameters<T>(c.io.init, layout, grid, positions, c.parallel.layout, params);
    } catch (const InputError& e) {
      throw InputError(std::string("io.init: ") + e.what());
    }
  }

  const std::unique_ptr<Comm> comm_backend = make_comm(c.parallel.comm, world);
  Comm& comm = *comm_backend;
  const View2<index_t> attention_positions = ring_positions(m, c.parallel, grid);
  AttentionLayers<T> attention = make_attention_layers<T>(c, grid, comm, attention_positions);
  const std::size_t shared_attention_bytes = attention.shared_workspace_bytes;
  Transformer<T> model(m, layout, local_batch, n, std::move(attention.layers));
  View1<index_t> inputs("inputs", rows), targets("targets", rows);
  const SyntheticTask task{m.vocab, m.seq_len, c.train.seed};
  PhaseTimer timer;
  if (bench) model.set_timer(&timer);

  const std::size_t parameter_copies = adamw ? 4 : 2;
  const std::size_t allocated =
      parameter_copies * (params.replicated.span() + params.sharded.span()) * sizeof(T) + model.allocated_bytes() +
      shared_attention_bytes + gradient_sum.allocated_bytes() +
      (inputs.span() + targets.span() + positions_device.span() + attention_positions.span()) * sizeof(index_t);

  const double tokens_per_step = static_cast<double>(m.batch * m.seq_len);
  const T loss_scale = static_cast<T>(1.0 / tokens_per_step);
  double last_grad_norm = 0.0;
  std::vector<double> losses;      // every step's loss, to compare loss curves between decompositions
  std::vector<double> step_times;  // every step's seconds without snapshot writing
  const double start = wall_seconds();

  for (index_t step = first_step; step < c.train.steps; ++step) {
    if (fault.rank == grid.world_rank && fault.step == step)
      throw RuntimeFailure("injected fault (MINIATTN_FAULT) at step " + std::to_string(step));
    double step_seconds = 0.0;
    const double step_start = wall_seconds();
    {
      auto t = timer.measure("data");
      task.fill(step, first_sample, local_batch, positions_device, inputs, targets);
      grads.fill(T(0));
    }
    double loss_sum = 0.0;
    {
      auto t = timer.measure("forward");
      loss_sum = model.forward(params, inputs, targets);
    }
    {
      auto t = timer.measure("backward");
      model.backward(params, grads, targets, loss_scale);
    }
    double loss = 0.0;
    {
      auto t = timer.measure("gradient_exchange");
      comm.allreduce_sum(grads.replicated, grid.world, "gradients.replicated");
      comm.allreduce_sum(grads.sharded, grid.dp_comm, "gradients.wpe");
      loss = comm.allreduce_sum(loss_sum, grid.world, "loss") / tokens_per_step;
    }
    // Timed as a phase so that the bench shows what the guard costs.
    std::optional<PhaseTimer::Scope> nan_check_scope;
    if (c.train.nan_check) nan_check_scope.emplace(timer, "nan_check");
    if (c.train.nan_check && !std::isfinite(loss)) {
      const auto [stage, on_rank] = earliest_on_any_rank(model.first_nonfinite_stage(), grid.world);
      throw CollectiveFailure("train.nan_check: the loss is " + std::to_string(loss) + " at step " +
                              std::to_string(step) + "; first non-finite activation: " +
                              (stage < 0 ? std::string("none (the loss itself)")
                                         : model.stage_name(stage) + " (rank " + std::to_string(on_rank) + ")"));
    }
    nan_check_scope.reset();
    step_seconds += wall_seconds() - step_start;
    if (!c.io.snapshot.empty() && step == c.io.snapshot_step) {
      auto t = timer.measure("snapshot");
      io::SnapshotContent content;
      content.step = step;
      content.loss = loss;
      content.first_sample = first_sample;
      content.tokens = task.full_streams(step, first_sample, local_batch);
      try {
        io::write_snapshot<T>(c.io.snapshot, c, layout, grid, positions, params, grads, content);
      } catch (const InputError& e) {
        throw InputError(std::string("io.snapshot: ") + e.what());
      }
    }
    const double optimizer_start = wall_seconds();
    {
      auto t = timer.measure("optimizer");
      const double sharded_sq =
          comm.allreduce_sum(gradient_sum.sum_of_squares<T>(grads.sharded), grid.sp_comm, "grad_norm");
      last_grad_norm = std::sqrt(gradient_sum.sum_of_squares<T>(grads.replicated) + sharded_sq);
      if (c.train.nan_check) nan_check_scope.emplace(timer, "nan_check");
      if (c.train.nan_check && !std::isfinite(last_grad_norm)) {
        const auto [index, on_rank] = earliest_on_any_rank(first_nonfinite_gradient(layout, grads), grid.world);
        throw CollectiveFailure("train.nan_check: the gradient norm is " + std::to_string(last_grad_norm) +
                                " at step " + std::to_string(step) + "; first non-finite gradient: " +
                                (index < 0 ? std::string("none (the norm overflowed)")
                                           : layout.parameters()[static_cast<std::size_t>(index)].name + " (rank " +
                                                 std::to_string(on_rank) + ")"));
      }
      nan_check_scope.reset();
      const double clip = c.train.grad_clip;
      const double grad_scale = (clip > 0 && last_grad_norm > clip) ? clip / last_grad_norm : 1.0;
      optimizer.step(params, grads, grad_scale);
    }
    step_seconds += wall_seconds() - optimizer_start;
    step_times.push_back(step_seconds);
    losses.push_back(loss);

    // Checkpoint every io.checkpoint_every steps (if > 0) and after the last step.
    const bool last = step + 1 == c.train.steps;
    const bool periodic = c.io.checkpoint_every > 0 && (step + 1) % c.io.checkpoint_every == 0;
    if (!c.io.checkpoint.empty() && (periodic || last)) {
      auto t = timer.measure("checkpoint");
      try {
        io::write_checkpoint<T>(c.io.checkpoint, c, layout, grid, positions, params, adam_m, adam_v,
                                {step + 1, optimizer.steps_taken(), c.train.seed});
      } catch (const InputError& e) {
        throw InputError(std::string("io.checkpoint: ") + e.what());
      }
    }

    const bool log = !bench && ((step + 1) % c.run.log_every == 0 || step == 0 || step + 1 == c.train.steps);
    if (root && log) {
      const double elapsed = wall_seconds() - start;
      const double per_step_done = elapsed / static_cast<double>(step + 1 - first_step);
      const double eta = per_step_done * static_cast<double>(c.train.steps - step - 1);
      std::printf("step %6lld/%lld  loss %.6f  grad_norm %.3e  tok/s %.4g  elapsed %s  eta %s\n",
                  static_cast<long long>(step), static_cast<long long>(c.train.steps), loss, last_grad_norm,
                  tokens_per_step / per_step_done, format_seconds(elapsed).c_str(), format_seconds(eta).c_str());
      std::fflush(stdout);
    }
  }
  const double total_seconds = wall_seconds() - start;

  // Step time: median over steps after the first (warm-up) when there are more.
  const double step_median =
      median(std::vector<double>(step_times.begin() + (step_times.size() > 1 ? 1 : 0), step_times.end()));
  const FlopCount flops = training_step_flops(m);

  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [phase, v] : timer.samples()) {
    nlohmann::json p = {{"median_s", timer.median(phase)}, {"total_s", timer.total(phase)}, {"calls", v.size()}};
    phases[phase] = p;
  }

  // Bytes per step: measured by the Comm counters and modelled from the sizes.
  ExchangeModelInput exchange_input;
  exchange_input.model = m;
  exchange_input.strategy = c.parallel.strategy;
  exchange_input.world_size = grid.world_size;
  exchange_input.dp = grid.dp_size;
  exchange_input.sp = grid.sp_size;
  exchange_input.ulysses = grid.ulysses_size;
  exchange_input.scalar_bytes = sizeof(T);
  exchange_input.replicated_parameters = layout.replicated_size();
  exchange_input.local_wpe_parameters = layout.sharded_size();
  const std::map<std::string, double> modelled = modelled_exchange_bytes(exchange_input);
  const double step_count = static_cast<double>(c.train.steps - first_step);
  nlohmann::json exchanges = nlohmann::json::object();
  double measured_total = 0.0, modelled_total = 0.0, exchange_seconds = 0.0;
  for (const auto& [label, s] : comm.stats()) {
    const double per_step = static_cast<double>(s.bytes_sent) / step_count;
    const auto model_it = modelled.find(label);
    exchanges[label] = {{"bytes_per_step", per_step},
                        {"bytes_per_step_model", model_it == modelled.end() ? 0.0 : model_it->second},
                        {"calls", s.calls},
                        {"seconds", s.seconds}};
    measured_total += per_step;
    exchange_seconds += s.seconds;
  }
  for (const auto& [label, bytes] : modelled) {
    modelled_total += bytes;
    if (!exchanges.contains(label)) exchanges[label] = {{"bytes_per_step", 0.0}, {"bytes_per_step_model", bytes}};
  }

  nlohmann::json result;
  result["program"] = "miniattn";
  result["mode"] = to_string(c.run.mode);
  result["config"] = config_to_json(c);
  result["ranks"] = grid.world_size;
  result["dp"] = grid.dp_size;
  result["sp"] = grid.sp_size;
  result["ulysses_degree"] = grid.ulysses_size;
  result["strategy"] = to_string(c.parallel.strategy);
  result["comm"] = comm.backend();
  result["execution_space"] = {{"name", ExecSpace::name()},
                               {"concurrency", ExecSpace().concurrency()},
                               {"kokkos_version", KOKKOS_VERSION}};
  result["precision"] = to_string(m.precision);
  result["steps"] = c.train.steps;
  result["first_step"] = first_step;
  result["parameters"] = layout.total_global_count();
  result["phases"] = phases;
  result["step_seconds_median"] = step_median;
  result["total_seconds"] = total_seconds;
  result["tokens_per_second"] = step_median > 0 ? tokens_per_step / step_median : 0.0;
  result["tokens_per_second_per_rank"] = step_median > 0 ? tokens_per_step / step_median / grid.world_size : 0.0;
  result["flops_per_step"] = {{"forward", flops.forward}, {"backward", flops.backward}, {"total", flops.total()}};
  result["achieved_flops_per_second"] = step_median > 0 ? flops.total() / step_median : 0.0;
  result["exchange"] = exchanges;
  result["exchange_seconds_per_step"] = exchange_seconds / step_count;
  result["exchange_bytes_per_step_measured"] = measured_total;
  result["exchange_bytes_per_step_model"] = modelled_total;
  nlohmann::json memory_parts = nlohmann::json::object();
  for (const auto& [name, bytes] : plan.parts) memory_parts[name] = bytes;
  result["memory"] = {{"planned_bytes_per_rank", plan.total()},
                      {"planned_parts", memory_parts},
                      {"allocated_bytes_per_rank", allocated},
                      {"baseline_resident_bytes", baseline_resident},
                      {"available_bytes_per_rank", available.bytes}};
  result["peak_memory_bytes_per_rank"] = to_json(spread_over_ranks(static_cast<double>(peak_resident_bytes()), world));
  result["losses"] = losses;
  result["initial_loss"] = losses.empty() ? 0.0 : losses.front();
  result["final_loss"] = losses.empty() ? 0.0 : losses.back();
  result["final_grad_norm"] = last_grad_norm;

  if (bench) {
    // Against this machine's own GEMM rate, measured now with the same scalar type.
    const double gemm_rate = measure_gemm_flops<T>();
    const double per_rank_rate = step_median > 0 ? flops.total() / step_median / grid.world_size : 0.0;
    auto rate_of = [&](const std::string& phase, double phase_flops) {
      const double seconds = timer.median(phase);
      const double rate = seconds > 0 ? phase_flops / grid.world_size / seconds : 0.0;
      return nlohmann::json{{"seconds", seconds}, {"gflops_per_rank", rate * 1e-9}, {"fraction_of_gemm", rate / gemm_rate}};
    };
    nlohmann::json b;
    b["gemm_gflops_per_rank"] = gemm_rate * 1e-9;
    const BlasInfo blas = blas_info();
    b["blas"] = {{"library", blas.library}, {"core", blas.core}, {"threads", blas.threads}, {"warning", blas.warning}};
    b["step"] = {{"seconds", step_median},
                 {"gflops_per_rank", per_rank_rate * 1e-9},
                 {"fraction_of_gemm", per_rank_rate / gemm_rate}};
    b["forward"] = rate_of("forward", flops.forward);
    b["backward"] = rate_of("backward", flops.backward);
    const AttentionFlops attention = attention_flops(m);
    b["attention_forward"] = rate_of("attention_forward", attention.forward / static_cast<double>(m.layers));
    b["attention_backward"] = rate_of("attention_backward", attention.backward / static_cast<double>(m.layers));
    const double nan_check_per_step = timer.total("nan_check") / static_cast<double>(step_count);
    b["nan_check"] = {{"seconds_per_step", nan_check_per_step},
                      {"fraction_of_step", step_median > 0 ? nan_check_per_step / step_median : 0.0}};
    b["figure_of_merit_tokens_per_second_per_rank"] = result["tokens_per_second_per_rank"];
    const RingOverlap overlap = measure_ring_overlap(c, grid, comm, sizeof(T), rows * m.d_model, step_count);
    if (overlap.measured) {
      b["ring_overlap"] = {{"exchange_alone_seconds_per_step", overlap.alone_seconds},
                           {"exchange_exposed_seconds_per_step", overlap.exposed_seconds},
                           {"hidden_fraction", overlap.hidden_fraction()}};
    }
    result["bench"] = b;
  }
  grid.free();
  return result;
}

template nlohmann::json run_training<float>(const Config&, MPI_Comm);
template nlohmann::json run_training<double>(const Config&, MPI_Comm);

}  // namespace miniattn
