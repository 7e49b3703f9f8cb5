#pragma once
// The synthetic long-range tasks (docs/design.md section 2, data.task).
//
// copy (the default): each sample is a stream of N+1 tokens whose second half
// repeats the first: token[p] depends only on p mod P with P = ceil((N+1)/2).
// The first half draws from a per-sample alphabet of V slots, each slot a
// token drawn from the vocabulary (with replacement): a sample uses about 63%
// of the tokens, some twice or more as often as others. Two things lower the
// loss: the sample's token frequencies, read from context (towards `known`),
// then the twin P positions back (the second half towards 0). The twin is
// found by content: the pair (previous token, token) recurs about
// N / (2 (0.63 V)^2) times in the first half, so an induction head (one head
// reads the previous position, the next matches the pair) finds it at any
// distance. The frequencies are the stepping stone: with uniform tokens a
// model settles on the uniform guess and stays there (1000 steps at N = 2048),
// and with a 16-token alphabet (this task's first form) pairs are ambiguous
// and only the exact offset finds the twin (not learned beyond N = 128).
//
// lookup: each sample draws a map of 8 keys to 8 values. Its first quarter
// (R = floor((N+4)/4) positions) holds pair tokens, each the pair (k, map(k))
// of a random key k; after it, key tokens of random keys alternate with the
// pair token that answers them. Predicting an answer needs the sample's pair
// of that key from context: from the first quarter (on another rank under
// the zigzag layout, for the ranks holding the middle chunks) or an earlier
// answer. Unlike the copy, it is found by content (the query's key matches
// the pair's), not by an exact position, so rope learns it in a few hundred
// steps at 4096 tokens.
//
// A token is a pure function of (seed, step, sample, position), so any rank
// computes any token without communication.
#include <cstdint>

#include "core/config.hpp"
#include "core/counter_rng.hpp"
#include "core/types.hpp"

namespace miniattn {

struct SyntheticTask {
  index_t vocab = 0;
  index_t seq_len = 0;
  std::uint64_t seed = 0;
  bool documents = false;  // data.documents: pack documents of random lengths into each sample
  DataTask kind = DataTask::copy;

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
    return kind == DataTask::lookup ? lookup_token(step, sample, position) : copy_token(step, sample, position);
  }

  // The counter-based stream both tasks draw their tokens from.
  KOKKOS_INLINE_FUNCTION std::uint64_t data_stream() const { return rng::kStreamData ^ rng::mix64(seed); }

  KOKKOS_INLINE_FUNCTION index_t copy_token(index_t step, index_t sample, index_t position) const {
    const index_t period = (seq_len + 2) / 2;
    const std::uint64_t stream = data_stream();
    const index_t slot = rng::uniform_int(vocab, stream, static_cast<std::uint64_t>(step),
                                          static_cast<std::uint64_t>(sample),
                                          static_cast<std::uint64_t>(position % period));
    return rng::uniform_int(vocab, rng::mix64(stream), static_cast<std::uint64_t>(step),
                            static_cast<std::uint64_t>(sample), static_cast<std::uint64_t>(slot));
  }

  // lookup: key tokens 0..kKeys-1, pair (k, v) as kKeys + k kValues + v.
  KOKKOS_INLINE_FUNCTION index_t lookup_definitions() const { return (seq_len + 4) / 4; }
  KOKKOS_INLINE_FUNCTION index_t lookup_key(index_t step, index_t sample, index_t position) const {
    return rng::uniform_int(LookupTokens::kKeys, data_stream(), static_cast<std::uint64_t>(step),
                            static_cast<std::uint64_t>(sample), static_cast<std::uint64_t>(position));
  }
  KOKKOS_INLINE_FUNCTION index_t lookup_pair(index_t step, index_t sample, index_t key) const {
    const index_t value =
        rng::uniform_int(LookupTokens::kValues, rng::mix64(data_stream()),
                         static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(sample),
                         static_cast<std::uint64_t>(key));
    return LookupTokens::kKeys + key * LookupTokens::kValues + value;
  }
  KOKKOS_INLINE_FUNCTION index_t lookup_token(index_t step, index_t sample, index_t position) const {
    const index_t defined = lookup_definitions();
    if (position < defined) return lookup_pair(step, sample, lookup_key(step, sample, position));
    if ((position - defined) % 2 == 0) return lookup_key(step, sample, position);
    return lookup_pair(step, sample, lookup_key(step, sample, position - 1));
  }

  // The mean losses (nats) that mark a run's progress on this task, for the
  // console summary: guessing (ln V); `known`, a model that knows the task's
  // form but none of the sample's content; `solved`, one that uses it all
  // (copy: the entropy of a sample's slot frequencies on the first half, 0 on
  // the second; lookup:
  // the pairs' and keys' ln 8 where they are random, 0 on every answer).
  struct LossLevels {
    double guessing, known, solved;
    const char *known_means, *solved_means;
  };
  LossLevels loss_levels() const;

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
