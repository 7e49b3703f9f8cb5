#pragma once
// The run's configuration: every key of the input deck (docs/design.md section 4),
// with its default. parse_config() fills it from YAML plus --set overrides and
// rejects anything unknown, mistyped or impossible before any work starts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/deck_words.hpp"

namespace miniattn {

// lookup's tokens: kKeys key tokens, then one token per (key, value) pair.
struct LookupTokens {
  static constexpr std::int64_t kKeys = 8, kValues = 8, kVocab = kKeys + kKeys * kValues;
};

struct ModelConfig {
  std::int64_t vocab = 256;
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 0;  // key/value heads (GQA; 1 = MQA); 0 = heads
  std::int64_t ffn = 0;  // 0 means 4 * d_model
  std::int64_t layers = 2;
  std::int64_t seq_len = 256;
  std::int64_t batch = 1;  // global batch, split over parallel.dp
  bool causal = true;
  std::int64_t window = 0;  // sliding window: keys fewer than `window` positions away; 0 = all
  Precision precision = Precision::fp64;
  PositionEncoding positions = PositionEncoding::learned;
  double rope_theta = 10000.0;  // RoPE's base: inv_freq_i = rope_theta^(-2i/Dh)

  std::int64_t head_dim() const { return d_model / heads; }
  std::int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Rows of attn.qkv: q (d_model) | k | v (kv_head_count() heads each).
  std::int64_t qkv_rows() const { return d_model + 2 * kv_head_count() * head_dim(); }
  std::int64_t ffn_width() const { return ffn > 0 ? ffn : 4 * d_model; }
};

struct ParallelConfig {
  Strategy strategy = Strategy::local;
  Layout layout = Layout::contiguous;
  std::int64_t dp = 1;
  std::int64_t tp = 1;  // Megatron tensor parallelism: heads and FFN units split over tp ranks
  std::int64_t pp = 1;  // pipeline stages: contiguous layers per stage, a 1F1B schedule
  // Model chunks per stage (PTD-P's interleaved 1F1B, Narayanan et al. 2021):
  // stage s holds chunks s, s + pp, ... of layers / (pp v) layers each.
  std::int64_t virtual_stages = 1;
  // Megatron's sequence parallelism inside TP (Korthikanti et al. 2022): the
  // LayerNorm and residual rows split over the TP ranks, gathered and
  // reduce-scattered; false: 2021's Megatron (and Megatron-LM's default
  // without --sequence-parallel), rows replicated, row-parallel outputs and
  // column-parallel input gradients all-reduced.
  bool tp_sequence_parallel = true;
  std::int64_t ulysses_degree = 1;
  CommBackend comm = CommBackend::mpi;
  GpuAwareMpi gpu_aware_mpi = GpuAwareMpi::automatic;  // false: stage exchanges through host buffers
};

struct TrainConfig {
  std::int64_t steps = 10;
  // Each DP group's samples are split into this many micro-batches, whose
  // gradients are summed before the update (the pipeline's unit of work).
  std::int64_t micro_batches = 1;
  double lr = 1e-3;
  OptimizerKind optimizer = OptimizerKind::adamw;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // global-norm clip; 0 disables
  std::uint64_t seed = 1234;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Stop at the first NaN/Inf in the loss or gradients, naming the step and the first layer.
  bool nan_check = true;
  Recompute recompute = Recompute::automatic;
};

struct IoConfig {
  static constexpr const char* kRandomInit = "random";  // io.init's word for the seeded initialisation
  std::string init = kRandomInit;  // random | PATH.h5
  std::string snapshot;         // empty: none
  std::int64_t snapshot_step = 0;
  std::string checkpoint;
  std::int64_t checkpoint_every = 0;
  std::string restart;
  bool random_init() const { return init == kRandomInit; }
};

struct RunConfig {
  RunMode mode = RunMode::train;
  std::int64_t log_every = 10;
  std::string result;  // JSON file; empty: stdout line only
  // Memory one rank may use, GiB; 0: this node's available memory shared by its ranks.
  double memory_per_rank_gib = 0.0;
  // Machine description YAML (perfmodel/performance_model.hpp): read by run.mode
  // predict (required), written by run.mode calibrate (required).
  std::string machine;
  // run.mode predict: rank counts 1, 2, 4, ... up to this one.
  std::int64_t predict_max_ranks = 4096;
  // run.mode predict: the sequence lengths of the table, comma-separated.
  std::string predict_seq_lens = "65536,262144,1048576,4194304";
  // The deadline of every wait of an exchange, seconds; 0: none
  // (comm/exchange_watch.hpp). PyTorch's and Megatron's default.
  double exchange_timeout_s = 600.0;
  // The folder of the ranks' flight records; empty: flight_record_folder().
  std::string flight_record;
};

// Where the flight records go: run.flight_record, else beside run.result
// (results/x.json: results/x.flight-record), else miniattn.flight-record.
std::string flight_record_folder(const RunConfig& run);

// Sequence-parallel ranks: world = dp x pp x tp x sp.
std::int64_t sp_size(const ParallelConfig& parallel, std::int64_t world_size);

// Whether a Ulysses all-to-all of `degree` ranks can carry kv_heads K/V heads:
// split over the ranks, or one replicated per rank; anything else would split
// a K/V head's group of query heads.
inline bool all_to_all_carries_kv_heads(std::int64_t kv_heads, std::int64_t degree) {
  return kv_heads % degree == 0 || degree % kv_heads == 0;
}

// The K/V heads each rank holds after a Ulysses all-to-all of `degree` ranks
// over kv_heads K/V heads: split when degree divides them, else (degree a
// multiple of kv_heads) one replicated head.
inline std::int64_t kv_heads_after_all_to_all(std::int64_t kv_heads, std::int64_t degree) {
  return kv_heads % degree == 0 ? kv_heads / degree : 1;
}

struct DataConfig {
  DataTask task = DataTask::copy;
  bool documents = false;  // pack documents of random lengths into each sample; attention stays within one
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  IoConfig io;
  RunConfig run;
  KernelConfig kernels;
  DataConfig data;
  std::string deck_path;
};

// Parses the deck at deck_path, applies "section.key=value" overrides in order,
// and validates. world_size is the number of MPI ranks (for dp/sp checks).
// Throws InputError naming the key and the reason.
Config parse_config(const std::string& deck_path, const std::vector<std::string>& overrides, int world_size);

// Same, from YAML text (tests).
Config parse_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides, int world_size);

// --- additions (config.cpp; validate_config: config_validation.cpp; config_to_yaml:
// config_yaml.cpp; operator==: config_fields.cpp) ---------------------------------

// The checks parse_config() runs after all overrides, for a Config built in
// code. Throws InputError naming the key and the reason.
void validate_config(const Config& config, int world_size);

// One "section.key=value" override split at the first '.' and the first '='.
// Throws InputError when there is no '=' or no "section." before the key.
struct Override {
  std::string section;
  std::string key;
  std::string value;  // YAML scalar text, parsed with the key's type
};
Override split_override(const std::string& text);

// The full resolved configuration as a YAML deck; parse_config_text() of it
// gives back an equal Config (deck_path aside, which is written as a comment).
std::string config_to_yaml(const Config& config);

// run.predict_seq_lens as numbers: comma-separated integers >= 1 (spaces allowed).
// Throws InputError "run.predict_seq_lens: ..." otherwise.
std::vector<std::int64_t> parse_predict_seq_lens(const std::string& text);

// Every field of every section compared, deck_path included.
bool operator==(const Config& a, const Config& b);
bool operator!=(const Config& a, const Config& b);

}  // namespace miniattn
