#include "model/synthetic_task.hpp"

#include <algorithm>
#include <cmath>

namespace miniattn {

// Over the N targets (positions 1..N of the stream).
SyntheticTask::LossLevels SyntheticTask::loss_levels() const {
  const double n = static_cast<double>(seq_len), guessing = std::log(static_cast<double>(vocab));
  if (kind == DataTask::copy) {
    // A token's count c among the V slots is Binomial(V, 1/V); the expected
    // entropy of the frequencies c / V is -V E[(c/V) ln(c/V)].
    const double v = static_cast<double>(vocab);
    double entropy = 0;
    for (index_t c = 1; c <= vocab; ++c) {
      const double k = static_cast<double>(c);
      const double log_pmf = std::lgamma(v + 1) - std::lgamma(k + 1) - std::lgamma(v - k + 1) + k * std::log(1 / v) +
                             (v - k) * std::log1p(-1 / v);
      entropy -= v * std::exp(log_pmf) * (k / v) * std::log(k / v);
    }
    const double first_half = static_cast<double>((seq_len + 2) / 2 - 1);  // targets 1 .. period - 1
    return {guessing, entropy, entropy * first_half / n, "each sample's token frequencies known", "copying"};
  }
  const double keys = std::log(static_cast<double>(LookupTokens::kKeys));
  const double pairs = std::log(static_cast<double>(LookupTokens::kKeys * LookupTokens::kValues));
  const double values = std::log(static_cast<double>(LookupTokens::kValues));
  const double definitions = std::min(n, static_cast<double>(lookup_definitions() - 1));
  const double answers = std::floor((n - definitions) / 2), queries = n - definitions - answers;
  return {guessing, (definitions * pairs + queries * keys + answers * values) / n,
          (definitions + queries) * keys / n, "the task's form known, no pair found",
          "every pair found in context"};
}

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
