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

// One sample per thread, its positions in order: a running count (a GPU runs
// this once per micro-batch, as long as one pass over N positions).
void SyntheticTask::fill_documents(index_t step, index_t first_sample, const View2<index_t>& ids) const {
  const SyntheticTask task = *this;
  const index_t n = static_cast<index_t>(ids.extent(1));
  Kokkos::parallel_for(
      "miniattn::SyntheticTask::fill_documents", Kokkos::RangePolicy<ExecSpace>(0, static_cast<index_t>(ids.extent(0))),
      KOKKOS_LAMBDA(const index_t s) {
        index_t document = 0;
        for (index_t p = 0; p < n; ++p) {
          if (task.documents && task.document_starts(step, first_sample + s, p)) ++document;
          ids(s, p) = document;
        }
      });
}

Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> SyntheticTask::full_documents(
    index_t step, index_t first_sample, index_t local_batch) const {
  const View2<index_t> ids("document_ids", local_batch, seq_len);
  fill_documents(step, first_sample, ids);
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ids);
}

Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> SyntheticTask::full_streams(
    index_t step, index_t first_sample, index_t local_batch) const {
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> streams("tokens", local_batch, seq_len + 1);
  for (index_t s = 0; s < local_batch; ++s)
    for (index_t p = 0; p <= seq_len; ++p) streams(s, p) = token(step, first_sample + s, p);
  return streams;
}

}  // namespace miniattn
