// The one table of deck keys (config_fields.hpp) and what is nothing but a
// walk of it: the text helpers of the messages, and Config's equality. The
// parser (config.cpp), the validator (config_validation.cpp) and the writers
// (config_yaml.cpp, config_json.cpp) walk the same table.
#include "core/config_fields.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace miniattn {

namespace config_fields {

#define MINIATTN_CONFIG_REF(section, key) \
  +[](Config& c) -> decltype((c.section.key)) { return c.section.key; }
#define MINIATTN_CONFIG_ENUM(section, key)                                                                  \
  EnumRef {                                                                                                 \
    +[](const Config& c) { return static_cast<std::size_t>(c.section.key); },                               \
        +[](Config& c, std::size_t i) { c.section.key = static_cast<decltype(c.section.key)>(i); },          \
        &enum_names<std::decay_t<decltype(Config().section.key)>>                                          \
  }

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {"model", "vocab", MINIATTN_CONFIG_REF(model, vocab)},
      {"model", "d_model", MINIATTN_CONFIG_REF(model, d_model)},
      {"model", "heads", MINIATTN_CONFIG_REF(model, heads)},
      {"model", "kv_heads", MINIATTN_CONFIG_REF(model, kv_heads)},
      {"model", "ffn", MINIATTN_CONFIG_REF(model, ffn)},
      {"model", "layers", MINIATTN_CONFIG_REF(model, layers)},
      {"model", "seq_len", MINIATTN_CONFIG_REF(model, seq_len)},
      {"model", "batch", MINIATTN_CONFIG_REF(model, batch)},
      {"model", "causal", MINIATTN_CONFIG_REF(model, causal)},
      {"model", "window", MINIATTN_CONFIG_REF(model, window)},
      {"model", "precision", MINIATTN_CONFIG_ENUM(model, precision)},
      {"model", "positions", MINIATTN_CONFIG_ENUM(model, positions)},
      {"model", "rope_theta", MINIATTN_CONFIG_REF(model, rope_theta)},
      {"parallel", "strategy", MINIATTN_CONFIG_ENUM(parallel, strategy)},
      {"parallel", "layout", MINIATTN_CONFIG_ENUM(parallel, layout)},
      {"parallel", "dp", MINIATTN_CONFIG_REF(parallel, dp)},
      {"parallel", "tp", MINIATTN_CONFIG_REF(parallel, tp)},
      {"parallel", "pp", MINIATTN_CONFIG_REF(parallel, pp)},
      {"parallel", "virtual_stages", MINIATTN_CONFIG_REF(parallel, virtual_stages)},
      {"parallel", "ulysses_degree", MINIATTN_CONFIG_REF(parallel, ulysses_degree)},
      {"parallel", "tp_sequence_parallel", MINIATTN_CONFIG_REF(parallel, tp_sequence_parallel)},
      {"parallel", "comm", MINIATTN_CONFIG_ENUM(parallel, comm)},
      {"parallel", "gpu_aware_mpi", MINIATTN_CONFIG_ENUM(parallel, gpu_aware_mpi)},
      {"train", "steps", MINIATTN_CONFIG_REF(train, steps)},
      {"train", "micro_batches", MINIATTN_CONFIG_REF(train, micro_batches)},
      {"train", "lr", MINIATTN_CONFIG_REF(train, lr)},
      {"train", "optimizer", MINIATTN_CONFIG_ENUM(train, optimizer)},
      {"train", "weight_decay", MINIATTN_CONFIG_REF(train, weight_decay)},
      {"train", "grad_clip", MINIATTN_CONFIG_REF(train, grad_clip)},
      {"train", "seed", MINIATTN_CONFIG_REF(train, seed)},
      {"train", "beta1", MINIATTN_CONFIG_REF(train, beta1)},
      {"train", "beta2", MINIATTN_CONFIG_REF(train, beta2)},
      {"train", "eps", MINIATTN_CONFIG_REF(train, eps)},
      {"train", "nan_check", MINIATTN_CONFIG_REF(train, nan_check)},
      {"train", "recompute", MINIATTN_CONFIG_ENUM(train, recompute)},
      {"io", "init", MINIATTN_CONFIG_REF(io, init)},
      {"io", "snapshot", MINIATTN_CONFIG_REF(io, snapshot)},
      {"io", "snapshot_step", MINIATTN_CONFIG_REF(io, snapshot_step)},
      {"io", "checkpoint", MINIATTN_CONFIG_REF(io, checkpoint)},
      {"io", "checkpoint_every", MINIATTN_CONFIG_REF(io, checkpoint_every)},
      {"io", "restart", MINIATTN_CONFIG_REF(io, restart)},
      {"run", "mode", MINIATTN_CONFIG_ENUM(run, mode)},
      {"run", "log_every", MINIATTN_CONFIG_REF(run, log_every)},
      {"run", "result", MINIATTN_CONFIG_REF(run, result)},
      {"run", "memory_per_rank_gib", MINIATTN_CONFIG_REF(run, memory_per_rank_gib)},
      {"run", "machine", MINIATTN_CONFIG_REF(run, machine)},
      {"run", "predict_max_ranks", MINIATTN_CONFIG_REF(run, predict_max_ranks)},
      {"run", "predict_seq_lens", MINIATTN_CONFIG_REF(run, predict_seq_lens)},
      {"run", "exchange_timeout_s", MINIATTN_CONFIG_REF(run, exchange_timeout_s)},
      {"run", "flight_record", MINIATTN_CONFIG_REF(run, flight_record)},
      {"kernels", "attention", MINIATTN_CONFIG_ENUM(kernels, attention)},
      {"kernels", "chunk", MINIATTN_CONFIG_REF(kernels, chunk)},
      {"kernels", "query_block", MINIATTN_CONFIG_REF(kernels, query_block)},
      {"kernels", "key_block", MINIATTN_CONFIG_REF(kernels, key_block)},
      {"kernels", "deterministic", MINIATTN_CONFIG_REF(kernels, deterministic)},
      {"kernels", "cudnn_workspace_mib", MINIATTN_CONFIG_REF(kernels, cudnn_workspace_mib)},
      {"kernels", "cudnn_documents", MINIATTN_CONFIG_ENUM(kernels, cudnn_documents)},
      {"data", "task", MINIATTN_CONFIG_ENUM(data, task)},
      {"data", "documents", MINIATTN_CONFIG_REF(data, documents)},
  };
  return table;
}

#undef MINIATTN_CONFIG_REF
#undef MINIATTN_CONFIG_ENUM

std::vector<std::string> Field::choices() const {
  if (const auto* e = std::get_if<EnumRef>(&ref)) return e->names();
  return {};
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "parallel", "train", "io", "run", "kernels", "data"};
  return names;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string format_real(double value) {
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  if (!std::isfinite(value)) return text;
  if (text.find('.') == std::string::npos) {
    const std::size_t e = text.find_first_of("eE");
    if (e == std::string::npos) {
      text += ".0";
    } else {
      text.insert(e, ".0");
    }
  }
  return text;
}

}  // namespace config_fields

using config_fields::Field;
using config_fields::Overloaded;

bool operator==(const Config& a, const Config& b) {
  if (a.deck_path != b.deck_path) return false;
  Config& left = const_cast<Config&>(a);  // read only
  Config& right = const_cast<Config&>(b);
  for (const Field& field : config_fields::fields()) {
    const bool equal =
        std::visit(Overloaded{[&](config_fields::EnumRef ref) { return ref.get(left) == ref.get(right); },
                              [&](auto ref) { return ref(left) == ref(right); }},
                   field.ref);
    if (!equal) return false;
  }
  return true;
}

bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace miniattn
