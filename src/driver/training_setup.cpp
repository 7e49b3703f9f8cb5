// Building one rank's training state: its share, the memory check, the
// objects, and the parameters (restart, initial file or random).
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "comm/exchange_watch.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "model/pipeline_schedule.hpp"
#include "driver/training_state.hpp"
#include "io/checkpoint.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "io/parameter_io.hpp"
#include "perf/blas_core.hpp"
#include "perf/gemm_rate.hpp"

namespace miniattn {

namespace {

// The ranks of this node whose Views share this rank's memory: all of them
// for host memory, those on the same GPU for device memory.
int ranks_sharing_memory(MPI_Comm world) {
  MPI_Comm node, same_memory;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_split(node, memory_device_id() + 1, 0, &same_memory);
  int size = 1;
  MPI_Comm_size(same_memory, &size);
  MPI_Comm_free(&same_memory);
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

// The weights the model computes with: the parameters' own buffers, or (when
// T is narrower than the parameters, bf16) a copy of their layout in T.
template <class T>
ParameterBuffers<T> compute_weights(const ParameterBuffers<Param<T>>& params, const ParameterLayout& layout) {
  if constexpr (std::is_same<T, Param<T>>::value) {
    (void)layout;
    return params;
  } else {
    return ParameterBuffers<T>(layout, "weights");
  }
}

AgreedMemory agreed_available_memory(std::size_t local, MPI_Comm world) {
  const double unknown = std::numeric_limits<double>::infinity();
  const LeastOverRanks least = least_over_ranks(local == 0 ? unknown : static_cast<double>(local), world);
  if (std::isinf(least.value)) return {};
  return {static_cast<std::size_t>(least.value), least.rank};
}

void print_run_header(const Config& c, const ProcessGrid& grid, const ParameterLayout& layout,
                      const MemoryCheck& memory) {
  const ModelConfig& m = c.model;
  std::printf("miniattn: %s, %s, %d ranks (dp %d x pp %d x tp %d x sp %d), strategy %s, %lld parameters, "
              "%lld micro-batches\n",
              to_string(c.run.mode), to_string(m.precision), grid.world_size, grid.dp_size, grid.pp_size,
              grid.tp_size, grid.sp_size, to_string(c.parallel.strategy),
              static_cast<long long>(layout.total_global_count()), static_cast<long long>(c.train.micro_batches));
  std::printf("miniattn: model V=%lld D=%lld H=%lld F=%lld L=%lld N=%lld B=%lld %s, %s positions; planned memory "
              "per rank %s (available %s), q, k, v and fc1 output %s\n",
              static_cast<long long>(m.vocab), static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
              static_cast<long long>(m.ffn_width()), static_cast<long long>(m.layers),
              static_cast<long long>(m.seq_len), static_cast<long long>(m.batch), m.causal ? "causal" : "non-causal",
              to_string(m.positions),
              format_bytes(static_cast<double>(memory.plan.total())).c_str(),
              memory.available.bytes ? format_bytes(static_cast<double>(memory.available.bytes)).c_str()
                                     : "not checked",
              memory.plan.recompute ? "recomputed in the backward pass" : "kept for the backward pass");
  // Said here as well as in the report: every mode's GEMMs run at the rate it names.
  const BlasInfo blas = blas_info();
  if (!blas.warning.empty()) std::printf("miniattn: warning: %s\n", blas.warning.c_str());
  if (!replaced_blas_core().empty())
    std::printf("miniattn: OpenBLAS runs its %s kernels, chosen by miniattn for this CPU's flags (OpenBLAS chose %s; "
                "set OPENBLAS_CORETYPE to choose yourself)\n",
                blas.core.c_str(), replaced_blas_core().c_str());
  std::fflush(stdout);
}

// The deck keys that decide the larger share of a plan, and what to change.
// A plan that keeps what it could recompute (train.recompute: never) has the
// cheapest remedy. Where the parameters, their gradients and the optimizer's
// moments take more than everything else, more sequence-parallel ranks do not help.
struct MemoryRemedy {
  const char* keys;
  const char* advice;
};
MemoryRemedy memory_remedy(const MemoryPlan& plan) {
  std::size_t parameters = 0;
  for (const auto& [name, bytes] : plan.parts)
    if (name == MemoryPart::parameters_gradients || name == MemoryPart::optimizer) parameters += bytes;
  if (!plan.recompute)
    return {"train.recompute", "set train.recompute: auto (recompute q, k, v and fc1's output where they do not fit)"};
  if (2 * parameters > plan.total())
    return {"model.vocab, model.d_model, model.ffn, model.layers",
            "split the parameters over parallel.tp or parallel.pp, use a smaller model"};
  return {"model.seq_len", "use more ranks, a shorter sequence, a smaller batch or (gemm attention) a smaller "
                           "kernels.chunk"};
}

// Pipeline stages plan different amounts: the most any rank needs decides,
// the same on every rank; rank 0 names its own parts.
void refuse_if_too_large(const Config& c, const MemoryCheck& memory, int ranks_sharing, MPI_Comm world) {
  const LeastOverRanks most = least_over_ranks(-static_cast<double>(memory.plan.total()), world);
  const std::size_t needed = static_cast<std::size_t>(-most.value), available = memory.available.bytes;
  if (available == 0 || needed <= available) return;
  std::string parts;
  for (const auto& [name, bytes] : memory.plan.parts) {
    if (!parts.empty()) parts += "; ";
    parts += std::string(to_string(name)) + " " + format_bytes(static_cast<double>(bytes));
  }
  if (most.rank != 0) parts = "the most of any rank, on rank " + std::to_string(most.rank) + "; rank 0: " + parts;
  const std::string amount = format_bytes(static_cast<double>(available));
  const std::string memory_kind = memory_device_id() < 0 ? "node" : "GPU";
  const std::string where = c.run.memory_per_rank_gib > 0
                                ? "run.memory_per_rank_gib allows " + amount
                                : amount + " are available per rank on rank " +
                                      std::to_string(memory.available.rank) + "'s " + memory_kind +
                                      " (the least of all ranks; " + std::to_string(ranks_sharing) +
                                      " ranks share rank 0's)";
  const MemoryRemedy remedy = memory_remedy(memory.plan);
  throw InputError(std::string(remedy.keys) + ": this run needs " + format_bytes(static_cast<double>(needed)) +
                   " per rank (" + parts + ") but " + where + "; " + remedy.advice +
                   ", or set run.memory_per_rank_gib");
}

// io.restart: parameters, moments and step from a checkpoint of the same run
// (what "the same run" means, train.seed included: io::review_restart).
template <class T>
index_t restart(TrainingState<T>& s) {
  const Config& c = s.config;
  io::CheckpointRead state;
  try {
    state = io::read_checkpoint<Param<T>>(c.io.restart, c, s.layout, s.grid, s.share.positions, s.params,
                                          s.first_moment(), s.second_moment());
  } catch (const io::RestartRefused&) {
    throw;  // already names the deck key at fault
  } catch (const InputError& e) {
    throw InputError(std::string("io.restart: ") + e.what());
  }
  if (state.step >= c.train.steps)
    throw InputError("train.steps: " + c.io.restart + " is at step " + std::to_string(state.step) +
                     "; train.steps (the total, counted from step 0) must be larger to continue");
  if (!c.io.snapshot.empty() && c.io.snapshot_step < state.step)
    throw InputError("io.snapshot_step: " + std::to_string(c.io.snapshot_step) + " comes before step " +
                     std::to_string(state.step) + ", where the restart from " + c.io.restart +
                     " begins; no snapshot would be written");
  // Taken, so said once: what the deck changes on purpose (io::review_restart).
  if (s.grid.world_rank == 0) {
    for (const std::string& line : state.warnings) std::printf("miniattn: warning: %s\n", line.c_str());
    std::fflush(stdout);
  }
  s.optimizer.set_steps_taken(state.optimizer_steps);
  return state.step;
}

}  // namespace

template <class T>
kernels::AttentionTiles agreed_attention_tiles(const Config& c, const ProcessGrid& grid) {
  kernels::AttentionTiles tiles;
  // libcudnn may load on some nodes only: auto takes cudnn on all ranks or on none.
  // Only a bf16 auto run asks, so that no other run loads cuDNN.
  const bool asks = c.kernels.attention == AttentionKernel::automatic && c.model.precision == Precision::bf16;
  const bool cudnn_everywhere =
      all_ranks(!asks || kernels::cudnn_unavailable_reason_for(c.model.head_dim()).empty(), grid.world);
  agree_on(grid.world, [&] {
    tiles = kernels::choose_attention_tiles<T>(c.kernels, c.model.head_dim(), kernels::TeamScratchLimits::of_backend(),
                                               cudnn_everywhere);
  });
  kernels::route_documents(tiles.blocking, c.data.documents, c.kernels.cudnn_documents);
  tiles.blocking.deterministic = c.kernels.deterministic;
  return tiles;
}

RankShare rank_share(const Config& c, const ProcessGrid& grid) {
  RankShare share;
  share.positions = owned_positions(c.model.seq_len, grid.sp_size, grid.sp_rank, c.parallel.layout);
  share.n = static_cast<index_t>(share.positions.size());
  share.local_batch = c.model.batch / grid.dp_size;
  share.first_sample = grid.dp_rank * share.local_batch;
  share.micro_batches = c.train.micro_batches;
  share.micro_batch = share.local_batch / share.micro_batches;
  share.chunk_slots = interleaved_slots(grid.pp_rank, grid.pp_size, static_cast<int>(c.parallel.virtual_stages),
                                       share.micro_batches);
  return share;
}

InjectedFault injected_fault(int world_rank) {
  InjectedFault fault;
  const char* text = std::getenv("MINIATTN_FAULT");
  if (!text) return fault;
  long rank = -1, step = -1, kib = -1, index = -1;
  double gib = -1.0;
  char label[64] = "";
  if (std::sscanf(text, "rank=%ld,skip_exchange=%63[^#]#%ld", &rank, label, &index) == 3) {
    fault.skip_label = label;
    fault.skip_index = index;
  } else if (std::sscanf(text, "rank=%ld,step=%ld", &rank, &step) == 2) {
    fault.step = step;
  } else if (std::sscanf(text, "rank=%ld,memory_gib=%lf", &rank, &gib) == 2) {
    fault.memory_gib = gib;
  } else if (std::sscanf(text, "rank=%ld,file_limit_kib=%ld", &rank, &kib) == 2) {
    fault.file_limit_kib = kib;
  }
  fault.rank = static_cast<int>(rank);
  if (fault.rank == world_rank && fault.file_limit_kib >= 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails (EFBIG) instead of killing the rank
    const rlim_t bytes = static_cast<rlim_t>(fault.file_limit_kib) * 1024;
    const rlimit limit{bytes, bytes};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  return fault;
}

namespace {

// A limit below what the smallest cut needs (the same plan on every rank of a stage: refused by all ranks of a
// stage alike; the stages hold the same attention blocks).
void refuse_small_cudnn_workspace(const Config& c, const MemoryPlan& plan) {
  const std::string why =
      cudnn_workspace_refusal(plan, c.kernels.cudnn_workspace_limit_bytes(), c.kernels.deterministic);
  if (!why.empty()) throw InputError(why);
}

}  // namespace

MemoryCheck check_memory(const Config& c, const ProcessGrid& grid, const ParameterLayout& layout,
                         const kernels::AttentionBlocking& blocking,
                         const InjectedFault& fault) {
  MemoryPlanInput in;
  static_cast<Decomposition&>(in) = decomposition_of(c, grid);
  in.model = c.model;
  in.optimizer = c.train.optimizer;
  in.stage = grid.pp_rank;
  in.replicated_parameters = layout.replicated_size();
  in.documents = c.data.documents;
  in.blocking = blocking;
  MemoryCheck memory;
  memory.device_free_bytes = device_free_bytes();
  const int sharing = ranks_sharing_memory(grid.world);
  const bool faulty = fault.rank == grid.world_rank && fault.memory_gib >= 0;
  const double memory_gib = faulty ? fault.memory_gib : c.run.memory_per_rank_gib;
  memory.available = agreed_available_memory(memory_available_per_rank(memory_gib, sharing), grid.world);
  memory.plan = plan_memory_within(in, memory.available.bytes, c.kernels.cudnn_workspace_limit_bytes(),
                                   c.train.recompute);
  // Pipeline stages plan different amounts: where one rank must recompute,
  // all do (a TP group's recomputation gathers rows), then every rank takes
  // the smallest cut.
  const bool agreed_recompute = least_over_ranks(in.recompute ? 0.0 : 1.0, grid.world).value == 0.0;
  if (agreed_recompute != in.recompute)
    memory.plan = plan_memory_within(in, memory.available.bytes, c.kernels.cudnn_workspace_limit_bytes(),
                                     Recompute::always);
  const double cut = static_cast<double>(in.blocking.cudnn_rows_per_call);
  const double agreed_cut = least_over_ranks(cut > 0 ? cut : std::numeric_limits<double>::infinity(), grid.world).value;
  if (!std::isinf(agreed_cut) && agreed_cut != cut) {
    in.blocking.cudnn_rows_per_call = static_cast<index_t>(agreed_cut);
    memory.plan = plan_memory(in);
  }
  memory.blocking = in.blocking;
  refuse_small_cudnn_workspace(c, memory.plan);
  if (grid.world_rank == 0) print_run_header(c, grid, layout, memory);
  refuse_if_too_large(c, memory, sharing, grid.world);
  return memory;
}

namespace {

// With packed documents, one [micro_batch, N] buffer of document ids per slot.
std::vector<View2<index_t>> document_buffers(bool documents, index_t slots, index_t micro_batch, index_t seq_len) {
  std::vector<View2<index_t>> ids;
  for (index_t slot = 0; documents && slot < slots; ++slot)
    ids.push_back(View2<index_t>("document_ids", micro_batch, seq_len));
  return ids;
}

}  // namespace

template <class T>
TrainingState<T>::TrainingState(const Config& c, const ProcessGrid& g, const RankShare& sh, const ParameterLayout& l,
                                const kernels::AttentionTiles& tiles, bool recompute)
    : config(c), grid(g), share(sh), layout(l), positions(to_device(sh.positions, "positions")), params(l, "params"),
      grads(l, "grads"), weights(compute_weights<T>(params, l)), optimizer(c.train, l),
      gradient_sum(std::max(l.replicated_size(), l.sharded_size())),
      attention_tiles(tiles),
      comm(make_comm(c.parallel.comm, g.world, c.parallel.gpu_aware_mpi)),
      attention_positions(ring_positions(c.model, c.parallel, g)),
      model(c.model, l, sh.micro_batch, sh.n,
            make_attention_layers<T>(c, g, *comm, attention_positions, attention_tiles.blocking, sh.micro_batch,
                                     sh.slots(), l.chunk_layers(0).count()),
            TensorParallelGroup{comm.get(), g.tp_comm, g.tp_rank, g.tp_size, c.parallel.tp_sequence_parallel},
            sh.chunk_slots,
            RotaryPositions<T>(c.model, positions, sh.micro_batch, c.data.documents ? sh.slots() : 0), recompute),
      inputs("inputs", sh.rows()), targets("targets", sh.rows()),
      document_ids(document_buffers(c.data.documents, model.slots(), sh.micro_batch, c.model.seq_len)),
      pipeline_send("pipeline_send", sends_input_gradients(g.pp_rank, l.virtual_stages()) ? model.chunk_rows() : 0,
                    c.model.d_model),
      task{c.model.vocab, c.model.seq_len, c.train.seed, c.data.documents, c.data.task} {
  if (c.run.mode == RunMode::bench) model.set_timer(&timer);
}

template <class T>
const ParameterBuffers<Param<T>>* TrainingState<T>::first_moment() const {
  return optimizer.has_moments() ? &optimizer.first_moment() : nullptr;
}

template <class T>
const ParameterBuffers<Param<T>>* TrainingState<T>::second_moment() const {
  return optimizer.has_moments() ? &optimizer.second_moment() : nullptr;
}

template <class T>
void TrainingState<T>::refresh_weights() const {
  if constexpr (!std::is_same<T, Param<T>>::value) {
    for (const auto& [from, to] : {std::make_pair(params.replicated, weights.replicated),
                                   std::make_pair(params.sharded, weights.sharded)}) {
      const View1<const Param<T>> master = from;
      const View1<T> copy = to;
      Kokkos::parallel_for(
          "miniattn::refresh_weights", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, copy.extent(0)),
          KOKKOS_LAMBDA(const index_t i) { copy(i) = T(master(i)); });
    }
  }
}

template <class T>
std::size_t TrainingState<T>::allocated_bytes() const {
  const std::size_t parameter_copies = optimizer.has_moments() ? 4 : 2;
  std::size_t index_elements = inputs.span() + targets.span() + positions.span() + attention_positions.span();
  for (const View2<index_t>& ids : document_ids) index_elements += ids.span();
  const std::size_t weight_copy =
      std::is_same<T, Param<T>>::value ? 0 : (weights.replicated.span() + weights.sharded.span()) * sizeof(T);
  return parameter_copies * (params.replicated.span() + params.sharded.span()) * sizeof(Param<T>) + weight_copy +
         model.allocated_bytes() + gradient_sum.allocated_bytes() +
         index_elements * sizeof(index_t) + pipeline_send.span() * sizeof(T);
}

template <class T>
index_t read_or_initialize_parameters(TrainingState<T>& s) {
  const Config& c = s.config;
  if (!c.io.restart.empty()) return restart(s);
  if (c.io.random_init()) {
    initialize_parameters<Param<T>>(s.layout, c.train.seed, s.positions, c.model.d_model, s.params);
    return 0;
  }
  try {
    io::load_parameters<Param<T>>(c.io.init, s.layout, s.grid, s.share.positions, c.parallel.layout, s.params);
  } catch (const InputError& e) {
    throw InputError(std::string("io.init: ") + e.what());
  }
  return 0;
}

template <class T>
index_t load_or_initialize(TrainingState<T>& s) {
  const WatchedRegion region("io.init/io.restart");  // HDF5's collective I/O waits inside the library
  const index_t first_step = read_or_initialize_parameters(s);
  s.refresh_weights();
  return first_step;
}

template struct TrainingState<float>;
template struct TrainingState<double>;
template struct TrainingState<bf16>;
template kernels::AttentionTiles agreed_attention_tiles<float>(const Config&, const ProcessGrid&);
template kernels::AttentionTiles agreed_attention_tiles<double>(const Config&, const ProcessGrid&);
template kernels::AttentionTiles agreed_attention_tiles<bf16>(const Config&, const ProcessGrid&);
template index_t load_or_initialize<float>(TrainingState<float>&);
template index_t load_or_initialize<double>(TrainingState<double>&);
template index_t load_or_initialize<bf16>(TrainingState<bf16>&);

}  // namespace miniattn
