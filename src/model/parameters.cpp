#include "model/parameters.hpp"

#include "core/counter_rng.hpp"

namespace miniattn {

template <class T>
void initialize_parameters(const ParameterLayout& layout, std::uint64_t seed, const View1<const index_t>& positions,
                           index_t d_model, const ParameterBuffers<T>& params) {
  const auto& infos = layout.parameters();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const ParameterInfo& p = infos[i];
    auto values = Kokkos::subview(params.buffer_of(p), Kokkos::make_pair(p.offset, p.offset + p.local_size));
    if (p.init == InitKind::zeros || p.init == InitKind::ones) {
      Kokkos::deep_copy(values, T(p.init == InitKind::ones ? 1 : 0));
      continue;
    }
    const double std = p.init_std;
    const std::uint64_t param_index = i;
    const bool sharded = p.sharded;
    const TensorShard shard = p.tensor_shard;
    const index_t D = d_model;
    auto pos = positions;
    Kokkos::parallel_for(
        "miniattn::initialize_parameters", Kokkos::RangePolicy<ExecSpace>(0, p.local_size),
        KOKKOS_LAMBDA(const index_t e) {
          // An element is keyed by its place in the global tensor: a wpe element by
          // its global row, a tensor-parallel shard's by its global row and column.
          const index_t global_e = sharded ? pos(e / D) * D + e % D : shard.global_element(e);
          values(e) = static_cast<T>(std * rng::normal(rng::kStreamInit, seed, param_index,
                                                       static_cast<std::uint64_t>(global_e)));
        });
  }
}

template void initialize_parameters<float>(const ParameterLayout&, std::uint64_t, const View1<const index_t>&,
                                           index_t, const ParameterBuffers<float>&);
template void initialize_parameters<double>(const ParameterLayout&, std::uint64_t, const View1<const index_t>&,
                                            index_t, const ParameterBuffers<double>&);

}  // namespace miniattn
