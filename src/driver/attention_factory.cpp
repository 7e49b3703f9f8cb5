#include "driver/attention_factory.hpp"

#include "attention/allgather_attention.hpp"
#include "attention/block_reach.hpp"
#include "attention/ring_attention.hpp"
#include "attention/ring_self_attention.hpp"
#include "attention/ulysses_attention.hpp"

namespace miniattn {

int ulysses_degree_for(const ParallelConfig& parallel, int sp_size) {
  if (parallel.strategy == Strategy::ulysses) return sp_size;
  if (parallel.strategy == Strategy::hybrid) return static_cast<int>(parallel.ulysses_degree);
  return 1;
}

View2<index_t> ring_positions(const ModelConfig& model, const ParallelConfig& parallel, const ProcessGrid& grid) {
  const int U = grid.ulysses_size, G = grid.ring_size;
  const index_t n = model.seq_len / grid.sp_size;
  View2<index_t> table("ring_positions", G, U * n);
  auto host = Kokkos::create_mirror_view(table);
  for (int g = 0; g < G; ++g)
    for (int u = 0; u < U; ++u) {
      const std::vector<index_t> owned = owned_positions(model.seq_len, grid.sp_size, g * U + u, parallel.layout);
      for (index_t i = 0; i < n; ++i) host(g, u * n + i) = owned[static_cast<std::size_t>(i)];
    }
  Kokkos::deep_copy(table, host);
  return table;
}

template <class T>
AttentionLayers<T> make_attention_layers(const Config& c, const ProcessGrid& grid, Comm& comm,
                                         const View2<const index_t>& positions,
                                         const kernels::AttentionBlocking& blocking, index_t micro_batch, index_t slots,
                                         index_t layers_per_slot) {
  const ModelConfig& m = c.model;
  const Strategy strategy = c.parallel.strategy;
  const std::string name = to_string(strategy);
  const index_t B = micro_batch, H = m.heads / grid.tp_size, Dh = m.head_dim();  // this TP rank's heads
  const index_t KV = m.kv_head_count() / grid.tp_size;
  const index_t n = m.seq_len / grid.sp_size;

  AttentionLayers<T> result;
  auto& layers = result.layers;
  // Ring attention sees q [B, H / U, U * n, Dh] and k, v with the K/V heads
  // left after the all-to-all (U = 1 for local and ring).
  const index_t U = grid.ulysses_size;
  std::shared_ptr<RingWorkspace<T>> ring_workspace;
  std::shared_ptr<AllGatherWorkspace<T>> gather_workspace;
  if (strategy == Strategy::allgather) {
    gather_workspace = std::make_shared<AllGatherWorkspace<T>>(B, H, KV, n, Dh, grid.ring_size, blocking);
    result.shared_workspace_bytes = gather_workspace->bytes();
  } else if (strategy != Strategy::rsa) {
    ring_workspace =
        std::make_shared<RingWorkspace<T>>(B, H / U, kv_heads_after_all_to_all(KV, U), U * n, Dh, grid.ring_size, blocking);
    result.shared_workspace_bytes = ring_workspace->bytes();
  }
  kernels::AttentionMask mask = attention_mask(m);
  const int steps = ring_steps(m, c.parallel.layout, grid.sp_size, grid.ulysses_size);
  for (index_t l = 0; l < slots * layers_per_slot; ++l) {
    if (c.data.documents && l % layers_per_slot == 0) {
      result.documents.push_back(View2<index_t>("document_ids", B, m.seq_len));
      mask.documents = result.documents.back();
    }
    if (strategy == Strategy::allgather) {
      layers.push_back(
          std::make_unique<AllGatherAttention<T>>(comm, grid.ring_comm, positions, mask, blocking, gather_workspace));
    } else if (strategy == Strategy::local || strategy == Strategy::ring) {
      layers.push_back(std::make_unique<RingAttention<T>>(comm, grid.ring_comm, positions, mask, steps, blocking,
                                                          ring_workspace, name));
    } else if (strategy == Strategy::rsa) {
      layers.push_back(std::make_unique<RingSelfAttention<T>>(comm, grid.ring_comm, positions, mask, B, H, KV, Dh));
    } else {  // ulysses, hybrid
      auto inner = std::make_unique<RingAttention<T>>(comm, grid.ring_comm, positions, mask, steps, blocking,
                                                      ring_workspace, strategy == Strategy::ulysses ? "local" : "ring");
      layers.push_back(
          std::make_unique<UlyssesAttention<T>>(comm, grid.ulysses_comm, std::move(inner), B, H, KV, n, Dh, name));
    }
  }
  return result;
}

template AttentionLayers<float> make_attention_layers<float>(const Config&, const ProcessGrid&, Comm&,
                                                             const View2<const index_t>&,
                                                             const kernels::AttentionBlocking&, index_t, index_t,
                                                             index_t);
template AttentionLayers<double> make_attention_layers<double>(const Config&, const ProcessGrid&, Comm&,
                                                               const View2<const index_t>&,
                                                               const kernels::AttentionBlocking&, index_t, index_t,
                                                               index_t);
template AttentionLayers<bf16> make_attention_layers<bf16>(const Config&, const ProcessGrid&, Comm&,
                                                           const View2<const index_t>&,
                                                           const kernels::AttentionBlocking&, index_t, index_t,
                                                           index_t);

}  // namespace miniattn
