#include "perf/exchange_model.hpp"

#include "attention/block_reach.hpp"
#include "model/parameter_layout.hpp"

namespace miniattn {

namespace {

// Ring attention over G ranks for S steps (S = G but under a sliding window),
// per layer, blocks of X bytes: K/V move S - 1 times each way, the dK/dV
// accumulators S - 1 times and then home.
void add_ring(std::map<Exchange, double>& bytes, double G, double S, double X, double layers) {
  if (G <= 1) return;
  bytes[Exchange::ring_forward_kv] += layers * 2 * (S - 1) * X;
  bytes[Exchange::ring_backward_kv] += layers * 2 * (S - 1) * X;
  bytes[Exchange::ring_backward_dkdv] += layers * 2 * (S > 1 ? S : 0) * X;
}

}  // namespace

std::map<Exchange, double> modelled_exchange_bytes(const ExchangeModelInput& in) {
  const ModelConfig& m = in.model;
  // Activations travel as values (2 bytes in bf16), gradients as parameters (4), the lse as a statistic.
  const ElementSizes sizes = element_sizes(m.precision);
  const double s = static_cast<double>(sizes.value), p = static_cast<double>(sizes.param);
  const double b = static_cast<double>(m.batch / in.dp), n = static_cast<double>(m.seq_len / in.sp);
  const double t = in.tp, D = static_cast<double>(m.d_model), H = static_cast<double>(m.heads) / t;
  const double L = static_cast<double>(stage_layers(m.layers, in.pp, in.stage).count());
  const bool first_stage = in.stage == 0, last_stage = in.stage == in.pp - 1;
  const double X = b * n * D / t * s;
  // K or V of a block (GQA: KV of the H heads), and as a Ulysses all-to-all
  // moves it (the K/V heads split over U ranks, or one replicated per rank).
  const std::int64_t kv_heads = m.kv_head_count() / in.tp;
  const double head_bytes = b * n * static_cast<double>(m.head_dim()) * s;
  const double X_kv = head_bytes * static_cast<double>(kv_heads);
  const double X_kv_ulysses =
      head_bytes * static_cast<double>(in.ulysses * kv_heads_after_all_to_all(kv_heads, in.ulysses));
  const double P = in.sp, U = in.ulysses, G = static_cast<double>(in.sp / in.ulysses);
  const double S = ring_steps(m, in.layout, in.sp, in.ulysses);

  std::map<Exchange, double> bytes;
  const double shards = in.tp > 1 ? static_cast<double>(in.tensor_parallel_parameters) : 0.0;
  if (in.dp * in.sp * in.tp > 1)
    bytes[Exchange::gradients_replicated] = (static_cast<double>(in.replicated_parameters) - shards) * p;
  if (in.world_size() > 1) bytes[Exchange::loss] = sizeof(double);
  if (in.tp > 1 && in.dp * in.sp > 1) bytes[Exchange::gradients_tensor_parallel] = shards * p;
  const bool wpe = first_stage && in.local_wpe_parameters > 0;  // none with rotary positions
  if (wpe && in.dp * in.tp > 1) bytes[Exchange::gradients_wpe] = static_cast<double>(in.local_wpe_parameters) * p;
  if (in.pp > 1 && (first_stage || last_stage))
    bytes[Exchange::gradients_tied_embedding] = static_cast<double>(m.vocab * m.d_model) * p;
  const int norm_shares = (wpe && in.sp > 1) + (in.tp > 1) + (in.pp > 1);
  if (norm_shares > 0) bytes[Exchange::grad_norm] = sizeof(double) * norm_shares;
  if (!last_stage) bytes[Exchange::pipeline_activations] = b * n * D / t * s;
  if (!first_stage) bytes[Exchange::pipeline_gradients] = b * n * D / t * s;
  if (in.tp > 1) {
    const double chunk = (t - 1) * b * n * D / t * s;
    bytes[Exchange::tensor_parallel_gather] = L * 6 * chunk;
    bytes[Exchange::tensor_parallel_reduce_scatter] = L * 4 * chunk;
  }

  if (in.strategy == Strategy::ring || in.strategy == Strategy::local) {
    add_ring(bytes, P, S, X_kv, L);
  } else if (in.strategy == Strategy::allgather) {
    // All-gathers of K and V (forward, and again in backward), reduce-scatters of dK and dV.
    if (P > 1) {
      bytes[Exchange::allgather_forward_kv] = L * 2 * (P - 1) * X_kv;
      bytes[Exchange::allgather_backward_kv] = L * 2 * (P - 1) * X_kv;
      bytes[Exchange::allgather_backward_dkdv] = L * 2 * (P - 1) * X_kv;
    }
  } else if (in.strategy == Strategy::rsa) {
    if (P > 1) {
      bytes[Exchange::rsa_forward_k] = L * (P - 1) * X_kv;
      bytes[Exchange::rsa_forward_v] = L * (P - 1) * X_kv;
      bytes[Exchange::rsa_backward_kv] = L * 2 * (P - 1) * X_kv;
      bytes[Exchange::rsa_backward_dkdv] = L * 2 * P * X_kv;
    }
  } else {  // ulysses, hybrid
    // Every all-to-all is called, also on one rank, where it sends nothing.
    const double share = (U - 1) / U;
    bytes[Exchange::ulysses_forward_qkv] = L * (X + 2 * X_kv_ulysses) * share;
    bytes[Exchange::ulysses_forward_out] = L * X * share;
    bytes[Exchange::ulysses_forward_lse] = L * b * H * n * static_cast<double>(sizes.acc) * share;
    bytes[Exchange::ulysses_backward_dout] = L * X * share;
    bytes[Exchange::ulysses_backward_dqkv] = L * (X + 2 * X_kv_ulysses) * share;
    add_ring(bytes, G, S, X_kv_ulysses, L);
  }
  return bytes;
}

}  // namespace miniattn
