#include "driver/attention_factory.hpp"

#include "attention/block_reach.hpp"
#include "attention/strategy_table.hpp"

namespace miniattn {

View2<index_t> ring_positions(const ModelConfig& model, const ParallelConfig& parallel, const ProcessGrid& grid) {
  const int U = grid.ulysses_size, G = grid.ring_size;
  const index_t n = model.seq_len / grid.sp_size;
  View2<index_t> table("ring_positions", G, U * n);
  auto host = Kokkos::create_mirror_view(table);
  for (int g = 0; g < G; ++g) {
    const std::vector<index_t> rows = group_positions(model.seq_len, grid.sp_size, U, g, parallel.layout);
    for (index_t i = 0; i < U * n; ++i) host(g, i) = rows[static_cast<std::size_t>(i)];
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
  const AttentionSizes sizes = attention_sizes(m, decomposition_of(c, grid), micro_batch, blocking);
  AttentionLayers<T> result;
  const LayerMaker<T> make_layer = strategy_record(c.parallel.strategy)
                                       .make_layers<T>()({comm, grid, positions, sizes, c.parallel.layout}, result.shared_workspace_bytes);
  const kernels::AttentionMask mask = attention_mask(m);
  for (index_t l = 0; l < slots * layers_per_slot; ++l) result.layers.push_back(make_layer(mask));
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
