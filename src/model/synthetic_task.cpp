#include "model/synthetic_task.hpp"

namespace miniattn {

void SyntheticTask::fill(index_t step, index_t first_sample, index_t local_batch,
                         const View1<const index_t>& positions, const View1<index_t>& inputs,
                         const View1<index_t>& targets) const {
  const SyntheticTask task = *this;
  const index_t n = static_cast<index_t>(positions.extent(0));
  Kokkos::parallel_for(
      "miniattn::SyntheticTask::fill", Kokkos::RangePolicy<ExecSpace>(0, local_batch * n),
      KOKKOS_LAMBDA(const index_t r) {
        const index_t sample = first_sample + r / n;
        const index_t p = positions(r % n);
        inputs(r) = task.token(step, sample, p);
        targets(r) = task.token(step, sample, p + 1);
      });
}

Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> SyntheticTask::full_streams(
    index_t step, index_t first_sample, index_t local_batch) const {
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> streams("tokens", local_batch, seq_len + 1);
  for (index_t s = 0; s < local_batch; ++s)
    for (index_t p = 0; p <= seq_len; ++p) streams(s, p) = token(step, first_sample + s, p);
  return streams;
}

}  // namespace miniattn
