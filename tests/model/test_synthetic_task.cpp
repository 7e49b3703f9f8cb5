// The synthetic tasks' streams (data.task): copy repeats the first half, drawn
// from V slots of the vocabulary, in the second; lookup defines one value per key in its first quarter and then
// alternates key tokens with the pair token that answers them, the same
// pair for a key everywhere in a sample. And the loss levels the console
// summary prints, recounted here from the stream's form.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/synthetic_task.hpp"

namespace miniattn {
namespace {

constexpr index_t kSeqLen = 997, kBatch = 16;  // 997: a length nothing divides
constexpr index_t kKeys = LookupTokens::kKeys, kValues = LookupTokens::kValues;

TEST(SyntheticTask, CopyRepeatsTheFirstHalf) {
  const SyntheticTask task{64, kSeqLen, 5, false};
  const auto streams = task.full_streams(2, 0, kBatch);
  const index_t period = (kSeqLen + 2) / 2;
  for (index_t s = 0; s < kBatch; ++s)
    for (index_t p = 0; p + period <= kSeqLen; ++p) ASSERT_EQ(streams(s, p), streams(s, p + period)) << p;
}

// Each token's count in sample s's first `period` positions.
template <class Streams>
std::map<index_t, double> first_half_counts(const Streams& streams, index_t s, index_t period) {
  std::map<index_t, double> count;
  for (index_t p = 0; p < period; ++p) ++count[streams(s, p)];
  return count;
}

// A first half drawn from V slots of uniform tokens shows V (1 - (1 - 1/V)^V)
// = 40.6 distinct tokens of V = 64 once every slot is used (499 positions use
// all 64 but with odds < 1e-3); a 16-token alphabet (the task's first form)
// would show at most 16, uniform tokens about 64.
TEST(SyntheticTask, CopyDrawsFromVSlotsOfTheVocabulary) {
  const SyntheticTask task{64, kSeqLen, 5, false};
  const auto streams = task.full_streams(2, 0, kBatch);
  const index_t period = (kSeqLen + 2) / 2;
  double mean = 0;
  for (index_t s = 0; s < kBatch; ++s) {
    const std::map<index_t, double> seen = first_half_counts(streams, s, period);
    EXPECT_GE(seen.begin()->first, 0);
    EXPECT_LT(seen.rbegin()->first, 64);
    mean += static_cast<double>(seen.size()) / kBatch;
  }
  EXPECT_NEAR(mean, 64 * (1 - std::pow(63.0 / 64, 64)), 3.0);
}

// `known` recounted from long streams: the entropy of each first half's token
// frequencies (10^4 draws from 64 slots: within 0.01 of the slots' entropy),
// averaged over 64 samples (the slots' entropy varies by about 0.1 between
// samples). Copying predicts the targets at positions >= period; the others
// stay at `known`.
TEST(SyntheticTask, CopyLossLevelsCountTheStream) {
  constexpr index_t kLong = 20000, kSamples = 64;
  const SyntheticTask task{64, kLong, 5, false};
  const auto streams = task.full_streams(0, 0, kSamples);
  const index_t period = (kLong + 2) / 2;
  double entropy = 0;
  for (index_t s = 0; s < kSamples; ++s) {
    for (const auto& [token, c] : first_half_counts(streams, s, period))
      entropy -= c / period * std::log(c / period) / kSamples;
  }
  const SyntheticTask::LossLevels levels = task.loss_levels();
  EXPECT_NEAR(levels.guessing, std::log(64.0), 1e-12);
  EXPECT_NEAR(levels.known, entropy, 0.05);
  EXPECT_NEAR(levels.solved, levels.known * (period - 1) / kLong, 1e-12);
  EXPECT_LT(levels.known, levels.guessing - 0.3);
}

TEST(SyntheticTask, LookupAnswersEveryKeyWithItsPair) {
  const SyntheticTask task{LookupTokens::kVocab, kSeqLen, 5, false, DataTask::lookup};
  const auto streams = task.full_streams(2, 0, kBatch);
  const index_t defined = (kSeqLen + 4) / 4;
  std::map<std::vector<index_t>, int> maps;  // how many samples drew each map
  for (index_t s = 0; s < kBatch; ++s) {
    std::map<index_t, index_t> pair_of;  // key -> its pair token, the same all through the sample
    auto check_pair = [&](index_t token, index_t p) {
      ASSERT_GE(token, kKeys) << "position " << p;
      ASSERT_LT(token, LookupTokens::kVocab) << "position " << p;
      const index_t key = (token - kKeys) / kValues;
      const auto [at, fresh] = pair_of.emplace(key, token);
      ASSERT_EQ(at->second, token) << "sample " << s << " position " << p << ": key " << key << " has two values";
    };
    for (index_t p = 0; p <= kSeqLen; ++p) {
      const index_t token = streams(s, p);
      if (p < defined) {
        check_pair(token, p);
      } else if ((p - defined) % 2 == 0) {
        ASSERT_LT(token, kKeys) << "position " << p << " should hold a key";
      } else {
        check_pair(token, p);
        ASSERT_EQ((token - kKeys) / kValues, streams(s, p - 1)) << "position " << p << " answers another key";
      }
    }
    std::vector<index_t> map;
    for (const auto& [key, pair] : pair_of) map.push_back(pair);
    ++maps[map];
  }
  EXPECT_GT(maps.size(), std::size_t(kBatch / 2)) << "samples should draw their own maps";
}

// The levels over the N targets (stream positions 1..N), counted position by position.
TEST(SyntheticTask, LookupLossLevelsCountTheStream) {
  const SyntheticTask task{100, kSeqLen, 5, false, DataTask::lookup};
  const index_t defined = (kSeqLen + 4) / 4;
  double known = 0, solved = 0;
  for (index_t p = 1; p <= kSeqLen; ++p) {
    const bool pair = p < defined, key = !pair && (p - defined) % 2 == 0;
    known += pair ? std::log(double(kKeys * kValues)) : std::log(double(key ? kKeys : kValues));
    solved += pair || key ? std::log(double(kKeys)) : 0.0;
  }
  const SyntheticTask::LossLevels levels = task.loss_levels();
  EXPECT_NEAR(levels.guessing, std::log(100.0), 1e-12);
  EXPECT_NEAR(levels.known, known / kSeqLen, 1e-12);
  EXPECT_NEAR(levels.solved, solved / kSeqLen, 1e-12);
  EXPECT_LT(levels.solved, levels.known);
  EXPECT_LT(levels.known, levels.guessing);
}

}  // namespace
}  // namespace miniattn
