#pragma once
// The synthetic long-range task (docs/design.md section 2). Each sample is a stream
// of N+1 tokens whose second half repeats the first: token[p] depends only on
// p mod P with P = ceil((N+1)/2). The first half draws from a small per-sample
// alphabet of min(V, 16) tokens, so a model first learns which tokens a sample
// uses (loss falls from ln V towards ln 16 on the first half) and then learns
// to copy from P-1 positions back (loss towards 0 on the second half): a
// falling loss beyond ln 16 / 2 proves attention across the whole sequence.
//
// A token is a pure function of (seed, step, sample, position), so any rank
// computes any token without communication.
#include <cstdint>

#include "core/counter_rng.hpp"
#include "core/types.hpp"

namespace miniattn {

struct SyntheticTask {
  index_t vocab = 0;
  index_t seq_len = 0;
  std::uint64_t seed = 0;
  bool documents = false;  // data.documents: pack documents of random lengths into each sample

  static constexpr index_t kAlphabetSize = 16;
  // Packed documents: a document starts at each position p > 0 with
  // probability kDocumentsPerSample / N, so a sample holds about that many
  // more documents, of geometric lengths that need divide nothing.
  static constexpr index_t kDocumentsPerSample = 4;

  KOKKOS_INLINE_FUNCTION bool document_starts(index_t step, index_t sample, index_t position) const {
    if (position == 0) return false;
    const std::uint64_t stream = rng::kStreamDocuments ^ rng::mix64(seed);
    return rng::uniform_int(seq_len, stream, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(sample),
                            static_cast<std::uint64_t>(position)) < kDocumentsPerSample;
  }

  KOKKOS_INLINE_FUNCTION index_t token(index_t step, index_t sample, index_t position) const {
    const index_t period = (seq_len + 2) / 2;
    const index_t alphabet = vocab < kAlphabetSize ? vocab : kAlphabetSize;
    const std::uint64_t stream = rng::kStreamData ^ rng::mix64(seed);
    const index_t slot = rng::uniform_int(alphabet, stream, static_cast<std::uint64_t>(step),
                                          static_cast<std::uint64_t>(sample),
                                          static_cast<std::uint64_t>(position % period));
    return rng::uniform_int(vocab, rng::mix64(stream), static_cast<std::uint64_t>(step),
                            static_cast<std::uint64_t>(sample), static_cast<std::uint64_t>(slot));
  }

  // Inputs and next-token targets of local rows r = s * n + i (s < local_batch,
  // i < n = positions.extent(0)): inputs[r] = token(first_sample + s, positions[i]),
  // targets[r] = token(first_sample + s, positions[i] + 1).
  void fill(index_t step, index_t first_sample, index_t local_batch, const View1<const index_t>& positions,
            const View1<index_t>& inputs, const View1<index_t>& targets) const;

  // ids [count, N]: the document of each position of samples first_sample..
  // (documents starting before it, a pure function of seed, step and sample);
  // all 0 without packed documents.
  void fill_documents(index_t step, index_t first_sample, const View2<index_t>& ids) const;
  // The same ids of samples first_sample.. on the host (snapshots' /inputs/document_ids).
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> full_documents(index_t step, index_t first_sample,
                                                                                 index_t local_batch) const;

  // The whole stream [local_batch, N+1] of samples first_sample.. on the host (snapshots).
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> full_streams(index_t step, index_t first_sample,
                                                                                index_t local_batch) const;
};

}  // namespace miniattn
