// validate_config(): the combinations a deck may not ask for, checked after
// parsing (config.cpp) and before any work starts. Every refusal is an
// InputError that starts with the key to change and says why.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "core/config.hpp"
#include "core/config_fields.hpp"
#include "attention/strategy_record.hpp"
#include "core/error.hpp"
#include "kernels/attention/kernel_record.hpp"

namespace miniattn {

namespace {

using config_fields::Field;
using config_fields::join;

[[noreturn]] void reject(const std::string& key, const std::string& reason) { throw InputError(key + ": " + reason); }

void require_at_least(const std::string& key, std::int64_t value, std::int64_t minimum, const std::string& note = "") {
  if (value < minimum) {
    reject(key, "must be >= " + std::to_string(minimum) + note + ", got " + std::to_string(value));
  }
}

std::string number_text(double value) { return config_fields::format_real(value); }

// a * b for non-negative operands; false on overflow of int64.
bool multiply(std::int64_t a, std::int64_t b, std::int64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) return false;
  out = a * b;
  return true;
}

bool add(std::int64_t a, std::int64_t b, std::int64_t& out) {
  if (b > std::numeric_limits<std::int64_t>::max() - a) return false;
  out = a + b;
  return true;
}

// Every array size the run will index must fit in int64.
void check_sizes(const ModelConfig& m) {
  constexpr std::int64_t max_seq_len = std::int64_t{1} << 31;
  if (m.seq_len > max_seq_len) {
    reject("model.seq_len", "must be <= 2^31 = " + std::to_string(max_seq_len) + ", got " + std::to_string(m.seq_len));
  }
  struct Product {
    const char* key;
    const char* what;
    std::vector<std::int64_t> factors;
    const char* formula;
  };
  std::int64_t ffn_width = 0;
  if (!multiply(4, m.d_model, ffn_width)) {
    reject("model.d_model", "4 * model.d_model (the default model.ffn) overflows a 64-bit integer");
  }
  if (m.ffn > 0) ffn_width = m.ffn;
  const std::vector<Product> products = {
      {"model.vocab", "the embedding wte", {m.vocab, m.d_model}, "model.vocab * model.d_model"},
      {"model.seq_len", "the embedding wpe or the rotary table", {m.seq_len, m.d_model}, "model.seq_len * model.d_model"},
      {"model.d_model", "attn.qkv.weight", {3, m.d_model, m.d_model}, "3 * model.d_model^2"},
      {"model.ffn", "ffn.fc1.weight", {ffn_width, m.d_model}, "ffn width * model.d_model"},
      {"model.batch", "the tokens", {m.batch, m.seq_len + 1}, "model.batch * (model.seq_len + 1)"},
      {"model.batch", "the activations", {m.batch, m.seq_len, m.d_model}, "model.batch * model.seq_len * model.d_model"},
      {"model.batch", "the FFN activations", {m.batch, m.seq_len, ffn_width}, "model.batch * model.seq_len * ffn width"},
      {"model.batch", "the logits", {m.batch, m.seq_len, m.vocab}, "model.batch * model.seq_len * model.vocab"},
      {"model.batch", "the activations of all layers", {m.layers, m.batch, m.seq_len, ffn_width},
       "model.layers * model.batch * model.seq_len * ffn width"},
  };
  for (const Product& product : products) {
    std::int64_t total = 1;
    for (std::int64_t factor : product.factors) {
      if (!multiply(total, factor, total)) {
        reject(product.key, std::string(product.formula) + " (" + product.what + ") overflows a 64-bit integer");
      }
    }
  }
  // The parameter count: wte, wpe, per layer (2 LN + qkv + proj + 2 LN + fc1 + fc2), ln_f.
  const std::int64_t d = m.d_model, f = ffn_width;
  std::int64_t per_layer = 0, total = 0, term = 0;
  bool ok = multiply(d, d, term) && multiply(term, 4, per_layer) &&  // qkv (3 D^2) + proj (D^2)
            multiply(f, d, term) && multiply(term, 2, term) && add(per_layer, term, per_layer) &&  // fc1 + fc2
            add(per_layer, 9 * d + f, per_layer) &&  // biases and LayerNorms (d < 2^61 here)
            multiply(per_layer, m.layers, total) && multiply(m.vocab, d, term) && add(total, term, total) &&
            multiply(m.seq_len, d, term) && add(total, term, total) && add(total, 2 * d, total);
  if (!ok) reject("model.layers", "the parameter count overflows a 64-bit integer");
}

// Enumerations and finite numbers (already checked for parsed decks; not for
// a Config built in code).
void check_enums_and_reals(const Config& c) {
  Config& values = const_cast<Config&>(c);  // read only: the table hands out references
  for (const Field& field : config_fields::fields()) {
    if (const auto* e = std::get_if<config_fields::EnumRef>(&field.ref)) {
      if (e->get(values) >= e->names().size())
        reject(field.name(), "expected one of " + join(e->names()) + ", got the value " + std::to_string(e->get(values)));
    } else if (const auto* real = std::get_if<config_fields::RealRef>(&field.ref)) {
      const double value = (*real)(values);
      if (!std::isfinite(value)) reject(field.name(), "must be a finite number, got " + number_text(value));
    }
  }
}

// Interleaved 1F1B (Megatron-LM's rules): equal chunks of layers over pp x v
// virtual stages, and micro-batches in groups of pp, the schedule's unit.
void check_virtual_stages(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const std::int64_t v = p.virtual_stages, chunks = p.pp * v;
  if (v == 1) return;
  if (p.pp == 1) reject("parallel.virtual_stages", "interleaves pipeline stages: it needs parallel.pp > 1");
  if (c.model.layers % chunks != 0) {
    reject("parallel.virtual_stages", "needs model.layers divisible by parallel.pp x parallel.virtual_stages (" +
                                          std::to_string(c.model.layers) + " % " + std::to_string(chunks) +
                                          " != 0): every chunk holds the same layers");
  }
  if (c.train.micro_batches % p.pp != 0) {
    reject("parallel.virtual_stages", "needs train.micro_batches divisible by parallel.pp (" +
                                          std::to_string(c.train.micro_batches) + " % " + std::to_string(p.pp) +
                                          " != 0): the interleaved schedule takes micro-batches pp at a time");
  }
}

// Sizes and counts.
void check_sizes_and_counts(const Config& c) {
  const ModelConfig& m = c.model;
  require_at_least("model.vocab", m.vocab, 1);
  require_at_least("model.d_model", m.d_model, 1);
  require_at_least("model.heads", m.heads, 1);
  require_at_least("model.kv_heads", m.kv_heads, 0, " (0 means model.heads)");
  require_at_least("model.ffn", m.ffn, 0, " (0 means 4 * model.d_model)");
  require_at_least("model.layers", m.layers, 1);
  require_at_least("model.seq_len", m.seq_len, 1);
  require_at_least("model.window", m.window, 0, " (0 means full attention)");
  require_at_least("model.batch", m.batch, 1);
  require_at_least("parallel.dp", c.parallel.dp, 1);
  require_at_least("parallel.tp", c.parallel.tp, 1);
  require_at_least("parallel.pp", c.parallel.pp, 1);
  require_at_least("parallel.virtual_stages", c.parallel.virtual_stages, 1);
  require_at_least("train.micro_batches", c.train.micro_batches, 1);
  require_at_least("parallel.ulysses_degree", c.parallel.ulysses_degree, 1);
  if (c.run.mode == RunMode::predict) {
    require_at_least("train.steps", c.train.steps, 0);
  } else {
    require_at_least("train.steps", c.train.steps, 1, std::string(" for run.mode ") + to_string(c.run.mode));
  }
  require_at_least("run.log_every", c.run.log_every, 1);
  require_at_least("kernels.chunk", c.kernels.chunk, 0, " (0 chooses per backend)");
  require_at_least("kernels.query_block", c.kernels.query_block, 0, " (0 chooses per backend)");
  require_at_least("kernels.key_block", c.kernels.key_block, 0, " (0 chooses per backend)");
  require_at_least("io.snapshot_step", c.io.snapshot_step, 0);
  require_at_least("io.checkpoint_every", c.io.checkpoint_every, 0, " (0 means no periodic checkpoints)");
  check_sizes(m);

  if (m.d_model % m.heads != 0) {
    reject("model.heads", "must divide model.d_model (" + std::to_string(m.d_model) + " % " + std::to_string(m.heads) +
                              " != 0)");
  }
  if (m.heads % m.kv_head_count() != 0) {
    reject("model.kv_heads", "must divide model.heads (" + std::to_string(m.heads) + " % " +
                                 std::to_string(m.kv_heads) + " != 0): each K/V head serves a group of query heads");
  }
  if (m.positions == PositionEncoding::rope && m.head_dim() % 2 != 0)
    reject("model.positions", "rope rotates pairs of a head's values: the head width model.d_model / model.heads = " +
                                  std::to_string(m.head_dim()) + " must be even");
  if (!(m.rope_theta > 1.0))
    reject("model.rope_theta", "must be > 1 (RoPE's frequencies are its negative powers), got " +
                                   number_text(m.rope_theta));
}

// Tensor parallelism splits heads and FFN units over parallel.tp ranks.
void check_tensor_parallel(const ModelConfig& m, const ParallelConfig& p) {
  if (m.heads % p.tp != 0) {
    reject("parallel.tp", "must divide model.heads (" + std::to_string(m.heads) + " % " + std::to_string(p.tp) +
                              " != 0): each TP rank owns whole heads");
  }
  if (m.kv_head_count() % p.tp != 0) {
    reject("parallel.tp", "must divide model.kv_heads (" + std::to_string(m.kv_head_count()) + " % " +
                              std::to_string(p.tp) + " != 0): each TP rank owns whole K/V heads");
  }
  if (m.ffn_width() % p.tp != 0) {
    reject("parallel.tp", "must divide the FFN width model.ffn (" + std::to_string(m.ffn_width()) + " % " +
                              std::to_string(p.tp) + " != 0)");
  }
}

// The kernel's record (kernels/attention/kernel_record.cpp) names the
// precisions it computes; a strategy's record (attention/strategy_record.hpp)
// whether its blocks take kernels.attention at all. A strategy with kernels of
// its own (rsa) accepts the kernels that run everywhere, which the deck may
// name for every strategy alike, and refuses the ones it would silently ignore.
void check_attention_kernel(const Config& c) {
  const AttentionKernel kernel = c.kernels.attention;
  const std::string refusal = kernels::attention_kernel_precision_refusal(kernel, c.model.precision);
  if (!refusal.empty()) reject("kernels.attention", refusal);
  if (kernel == AttentionKernel::automatic || strategy_record(c.parallel.strategy).takes_attention_kernel) return;
  if (kernels::attention_kernel_record(kernel).runs_on(kernels::Backend::host)) return;
  std::string takers, everywhere;
  for (std::size_t s = 0; s < enum_names<Strategy>().size(); ++s)
    if (strategy_record(static_cast<Strategy>(s)).takes_attention_kernel)
      takers += std::string(takers.empty() ? "" : ", ") + to_string(static_cast<Strategy>(s));
  for (const kernels::AttentionKernelRecord& r : kernels::attention_kernel_records())
    if (r.runs_on(kernels::Backend::host)) everywhere += std::string(" or ") + to_string(r.kernel);
  reject("kernels.attention", std::string(to_string(kernel)) + " computes the blocks of " + takers +
                                  " attention; parallel.strategy " + to_string(c.parallel.strategy) +
                                  " keeps its own kernels (use auto" + everywhere + ")");
}

// Training, memory and the performance model's keys (run.machine itself is
// checked by the predict and calibrate modes, before any work; the list only
// matters to predict).
void check_training(const Config& c) {
  const TrainConfig& t = c.train;
  if (!(t.lr > 0.0)) reject("train.lr", "must be > 0, got " + number_text(t.lr));
  if (t.weight_decay < 0.0) reject("train.weight_decay", "must be >= 0, got " + number_text(t.weight_decay));
  if (t.grad_clip < 0.0) reject("train.grad_clip", "must be >= 0 (0 disables clipping), got " + number_text(t.grad_clip));
  if (t.beta1 < 0.0 || t.beta1 >= 1.0) reject("train.beta1", "must be in [0, 1), got " + number_text(t.beta1));
  if (t.beta2 < 0.0 || t.beta2 >= 1.0) reject("train.beta2", "must be in [0, 1), got " + number_text(t.beta2));
  if (!(t.eps > 0.0)) reject("train.eps", "must be > 0, got " + number_text(t.eps));
  if (c.kernels.cudnn_workspace_mib < 0.0)
    reject("kernels.cudnn_workspace_mib", "must be >= 0 (0 leaves cuDNN what the memory plan does not need), got " +
                                              number_text(c.kernels.cudnn_workspace_mib));
  if (c.run.exchange_timeout_s < 0.0)
    reject("run.exchange_timeout_s", "must be >= 0 seconds (0 means no deadline), got " +
                                         number_text(c.run.exchange_timeout_s));
  if (c.run.memory_per_rank_gib < 0.0)
    reject("run.memory_per_rank_gib", "must be >= 0 (0 means the node's available memory shared by its ranks), got " +
                                          number_text(c.run.memory_per_rank_gib));

  check_attention_kernel(c);
  require_at_least("run.predict_max_ranks", c.run.predict_max_ranks, 1);
  if (c.run.predict_max_ranks > (std::int64_t{1} << 30))
    reject("run.predict_max_ranks", "must be <= 2^30, got " + std::to_string(c.run.predict_max_ranks));
  if (c.run.mode == RunMode::predict) parse_predict_seq_lens(c.run.predict_seq_lens);
}

// Ulysses' all-to-all carries a TP rank's K/V heads split or replicated
// (all_to_all_carries_kv_heads).
void check_ulysses_kv_heads(const ModelConfig& m, const ParallelConfig& p, std::int64_t degree,
                            const std::string& degree_text) {
  const std::int64_t kv = m.kv_head_count() / p.tp;
  if (all_to_all_carries_kv_heads(kv, degree)) return;
  reject("model.kv_heads", "model.kv_heads / parallel.tp = " + std::to_string(kv) +
                               " must divide or be divisible by "
                               "the Ulysses degree for parallel.strategy " +
                               std::string(to_string(p.strategy)) + " (" + degree_text + ")");
}

// The process grid: world = dp x pp x tp x sp; the first three and the batch.
void check_grid_divides(const Config& c, std::int64_t world) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  if (world % p.dp != 0) {
    reject("parallel.dp", "must divide the number of MPI ranks (" + std::to_string(world) + " % " +
                              std::to_string(p.dp) + " != 0)");
  }
  if ((world / p.dp) % p.tp != 0) {
    reject("parallel.tp", "must divide the ranks of each DP group (" + std::to_string(world) + " ranks / parallel.dp " +
                              std::to_string(p.dp) + " = " + std::to_string(world / p.dp) + ", not divisible by " +
                              std::to_string(p.tp) + ")");
  }
  if ((world / (p.dp * p.tp)) % p.pp != 0) {
    reject("parallel.pp", "must divide the ranks of each DP group over parallel.tp (" + std::to_string(world) +
                              " ranks / (parallel.dp " + std::to_string(p.dp) + " x parallel.tp " +
                              std::to_string(p.tp) + ") = " + std::to_string(world / (p.dp * p.tp)) +
                              ", not divisible by " + std::to_string(p.pp) + ")");
  }
  if (p.pp > m.layers) {
    reject("parallel.pp", "must be <= model.layers (" + std::to_string(p.pp) + " stages > " +
                              std::to_string(m.layers) + " layers): each stage holds at least one layer");
  }
  check_virtual_stages(c);
  if (m.batch % p.dp != 0) {
    reject("model.batch", "must be divisible by parallel.dp (" + std::to_string(m.batch) + " % " +
                              std::to_string(p.dp) + " != 0)");
  }
  if ((m.batch / p.dp) % c.train.micro_batches != 0) {
    reject("train.micro_batches", "must divide the samples of each DP group, model.batch / parallel.dp (" +
                                      std::to_string(m.batch / p.dp) + " % " +
                                      std::to_string(c.train.micro_batches) + " != 0)");
  }
  check_tensor_parallel(m, p);
}

// The sequence split over sp = world / (dp pp tp) ranks: layout, rows, heads.
void check_sequence_split(const Config& c, std::int64_t world) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const std::int64_t sp = sp_size(p, world);
  const std::int64_t micro_batch = m.batch / p.dp / c.train.micro_batches;
  const std::string sp_text = "sp = " + std::to_string(world) + " ranks / (parallel.dp " + std::to_string(p.dp) +
                              " x parallel.pp " + std::to_string(p.pp) + " x parallel.tp " + std::to_string(p.tp) +
                              ") = " + std::to_string(sp);
  const StrategyRecord& strategy = strategy_record(p.strategy);
  if (!strategy.splits_sequence && sp != 1) {
    reject("parallel.strategy", "'" + std::string(to_string(p.strategy)) +
                                    "' does not split the sequence, so it needs sp == 1, but " + sp_text +
                                    " (use parallel.dp x parallel.pp x parallel.tp = " + std::to_string(world) +
                                    " = world size, or a sequence-parallel strategy)");
  }
  // The layout splits the sequence for 'local' too (zigzag: 2 chunks on 1 rank).
  if (p.layout != Layout::zigzag && m.seq_len % sp != 0) {
    reject("model.seq_len", "must be divisible by sp for parallel.layout " + std::string(to_string(p.layout)) + " (" +
                                sp_text + "; " +
                                std::to_string(m.seq_len) + " % " + std::to_string(sp) + " != 0)");
  }
  if (p.layout == Layout::zigzag && m.seq_len % (2 * sp) != 0) {
    reject("model.seq_len", "must be divisible by 2 * sp for parallel.layout zigzag (" + sp_text + "; " +
                                std::to_string(m.seq_len) + " % " + std::to_string(2 * sp) + " != 0)");
  }
  // Megatron's sequence parallelism splits each TP group's rows over its tp ranks.
  const std::int64_t rows = micro_batch * (m.seq_len / sp);
  if (rows % p.tp != 0) {
    reject("parallel.tp", "must divide the rows of each TP group's micro-batch, model.batch / parallel.dp / "
                          "train.micro_batches x model.seq_len / sp (" +
                              std::to_string(rows) + " % " + std::to_string(p.tp) + " != 0; " + sp_text + ")");
  }
  const std::int64_t heads = m.heads / p.tp;  // per TP rank
  const std::string heads_text = p.tp > 1 ? "model.heads / parallel.tp = " + std::to_string(heads)
                                           : "model.heads = " + std::to_string(heads);
  if (strategy.ulysses == UlyssesDegree::sp && heads % sp != 0) {
    reject("model.heads", "must be divisible by sp x parallel.tp for parallel.strategy " +
                              std::string(to_string(p.strategy)) + " (" + sp_text + "; " + heads_text +
                              ", not divisible by " + std::to_string(sp) + ")");
  }
  if (strategy.ulysses == UlyssesDegree::sp) check_ulysses_kv_heads(m, p, sp, sp_text);
  if (strategy.ulysses == UlyssesDegree::deck) {
    if (sp % p.ulysses_degree != 0) {
      reject("parallel.ulysses_degree", "must divide sp for parallel.strategy " + std::string(to_string(p.strategy)) +
                                            " (" + sp_text + "; " +
                                            std::to_string(sp) + " % " + std::to_string(p.ulysses_degree) +
                                            " != 0)");
    }
    if (heads % p.ulysses_degree != 0) {
      reject("model.heads", "must be divisible by parallel.ulysses_degree x parallel.tp for parallel.strategy " +
                                std::string(to_string(p.strategy)) + " (" + heads_text + ", not divisible by " +
                                std::to_string(p.ulysses_degree) + ")");
    }
    check_ulysses_kv_heads(m, p, p.ulysses_degree, "parallel.ulysses_degree = " + std::to_string(p.ulysses_degree));
  }
#ifndef MINIATTN_HAVE_NCCL
  if (p.comm == CommBackend::nccl) reject("parallel.comm", "'nccl' needs a build with MINIATTN_ENABLE_NCCL=ON");
#endif
}

// Files and steps.
void check_files(const Config& c) {
  const TrainConfig& t = c.train;
  const IoConfig& io = c.io;
  if (io.init.empty()) {
    reject("io.init", "must be 'random' or the path of an HDF5 weights file, got an empty string");
  }
  if (!io.snapshot.empty() && c.run.mode != RunMode::predict && io.snapshot_step >= t.steps) {
    reject("io.snapshot_step", "must be in [0, train.steps) = [0, " + std::to_string(t.steps) + "), got " +
                                   std::to_string(io.snapshot_step));
  }
  if (io.checkpoint_every > 0 && io.checkpoint.empty()) {
    reject("io.checkpoint_every", "is " + std::to_string(io.checkpoint_every) +
                                      " but io.checkpoint is empty (give io.checkpoint a PATH.h5)");
  }
  if (!io.restart.empty() && !io.random_init()) {
    reject("io.init", "cannot be combined with io.restart (a checkpoint already holds the parameters)");
  }
}

void check_data(const Config& c) {
  if (c.data.task == DataTask::lookup && c.model.vocab < LookupTokens::kVocab)
    reject("data.task", "lookup needs model.vocab >= " + std::to_string(LookupTokens::kVocab) + " (" +
                            std::to_string(LookupTokens::kKeys) + " key tokens and one token per (key, value) pair); "
                            "model.vocab is " + std::to_string(c.model.vocab));
}

}  // namespace

std::int64_t sp_size(const ParallelConfig& parallel, std::int64_t world_size) {
  return world_size / (parallel.dp * parallel.tp * parallel.pp);
}

void validate_config(const Config& c, int world_size) {
  if (world_size < 1) throw std::invalid_argument("validate_config: world_size must be >= 1");
  check_enums_and_reals(c);
  check_sizes_and_counts(c);
  check_training(c);
  check_data(c);
  check_grid_divides(c, world_size);
  check_sequence_split(c, world_size);
  check_files(c);
}

}  // namespace miniattn
