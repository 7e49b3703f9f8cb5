#include "perf/exchange_model.hpp"

#include "attention/strategy_table.hpp"
#include "model/parameter_layout.hpp"

namespace miniattn {

std::map<Exchange, double> modelled_exchange_bytes(const ExchangeModelInput& in) {
  const ModelConfig& m = in.model;
  // Activations travel as values (2 bytes in bf16), gradients as parameters (4), the lse as a statistic.
  const ElementSizes sizes = element_sizes(m.precision);
  const double s = static_cast<double>(sizes.value), p = static_cast<double>(sizes.param);
  const double b = static_cast<double>(m.batch / in.dp), n = static_cast<double>(m.seq_len / in.sp);
  const double t = in.tp, D = static_cast<double>(m.d_model);
  const double L = static_cast<double>(stage_layers(m.layers, in.pp, in.stage).count());
  const bool first_stage = in.stage == 0, last_stage = in.stage == in.pp - 1;
  // A rank's rows of a [b n, D] activation: a chunk of b n / t with TP's
  // sequence parallelism, all of them without it.
  const double X = static_cast<double>(in.tp_chunk_rows(static_cast<std::int64_t>(b * n))) * D * s;
  // Without sequence parallelism every TP rank holds the same rows, so the
  // gradients of what all TP ranks hold whole are equal there: summed over DP x SP only.
  const bool tp_replicates_rows = in.tp > 1 && !in.tp_sequence_parallel;
  const int whole_replicas = tp_replicates_rows ? in.dp * in.sp : in.dp * in.sp * in.tp;
  const int wpe_replicas = tp_replicates_rows ? in.dp : in.dp * in.tp;

  std::map<Exchange, double> bytes;
  const double shards = in.tp > 1 ? static_cast<double>(in.tensor_parallel_parameters) : 0.0;
  if (whole_replicas > 1)
    bytes[Exchange::gradients_replicated] = (static_cast<double>(in.replicated_parameters) - shards) * p;
  if (in.world_size() > 1) bytes[Exchange::loss] = sizeof(double);
  if (in.tp > 1 && in.dp * in.sp > 1) bytes[Exchange::gradients_tensor_parallel] = shards * p;
  const bool wpe = first_stage && in.local_wpe_parameters > 0;  // none with rotary positions
  if (wpe && wpe_replicas > 1) bytes[Exchange::gradients_wpe] = static_cast<double>(in.local_wpe_parameters) * p;
  if (in.pp > 1 && (first_stage || last_stage))
    bytes[Exchange::gradients_tied_embedding] = static_cast<double>(m.vocab * m.d_model) * p;
  const int norm_shares = (wpe && in.sp > 1) + (in.tp > 1) + (in.pp > 1);
  if (norm_shares > 0) bytes[Exchange::grad_norm] = sizeof(double) * norm_shares;
  // Each of the stage's v chunks sends its output on and its input gradient
  // back, but the model's last chunk (no output) and first (no input).
  const double v = in.virtual_stages;
  if (v - last_stage > 0) bytes[Exchange::pipeline_activations] = (v - last_stage) * X;
  if (v - first_stage > 0) bytes[Exchange::pipeline_gradients] = (v - first_stage) * X;
  if (tp_replicates_rows) {
    // Per layer two all-reduces forward (proj's and fc2's outputs) and two
    // backward (the input gradients of qkv and fc1), of the whole [b n, D].
    bytes[Exchange::tensor_parallel_allreduce] = L * 4 * b * n * D * s;
  } else if (in.tp > 1) {
    // Per layer two gathers forward, four backward (ln1's and ln2's outputs
    // again, and the output gradients), four reduce-scatters.
    const double chunk = (t - 1) * b * n * D / t * s;
    bytes[Exchange::tensor_parallel_gather] = L * 6 * chunk;
    bytes[Exchange::tensor_parallel_reduce_scatter] = L * 4 * chunk;
  }

  // The step's whole local batch; the kernels' blocking does not change what is sent.
  const AttentionSizes attention = attention_sizes(m, in, m.batch / in.dp, {});
  strategy_record(in.strategy).add_exchanges(attention, L, bytes);
  return bytes;
}

}  // namespace miniattn
