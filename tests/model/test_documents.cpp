// Packed documents of the synthetic task (data.documents): the device fill and
// the snapshots' host copy agree, ids start at 0 and never decrease along a
// sample, a sample's ids depend on nothing but (seed, step, sample), the
// documents are about as many as intended, and without packing there is one
// document per sample.
#include <gtest/gtest.h>

#include "model/synthetic_task.hpp"

namespace miniattn {
namespace {

constexpr index_t kSeqLen = 997, kBatch = 64;  // 997: a length nothing divides

SyntheticTask packed_task() { return SyntheticTask{256, kSeqLen, 7, true}; }

auto device_ids(const SyntheticTask& task, index_t step, index_t first_sample, index_t count) {
  View2<index_t> ids("ids", count, kSeqLen);
  task.fill_documents(step, first_sample, ids);
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ids);
}

TEST(PackedDocuments, DeviceAndHostAgreeAndIdsCountStarts) {
  const SyntheticTask task = packed_task();
  const auto device = device_ids(task, 3, 10, kBatch);
  const auto host = task.full_documents(3, 10, kBatch);
  double documents = 0;
  for (index_t s = 0; s < kBatch; ++s) {
    EXPECT_EQ(host(s, 0), 0);
    for (index_t p = 0; p < kSeqLen; ++p) {
      ASSERT_EQ(device(s, p), host(s, p)) << "sample " << s << " position " << p;
      if (p > 0) {
        EXPECT_EQ(host(s, p) - host(s, p - 1), task.document_starts(3, 10 + s, p) ? 1 : 0);
      }
    }
    documents += static_cast<double>(host(s, kSeqLen - 1) + 1);
  }
  // 1 + about kDocumentsPerSample (Poisson) starts per sample: the mean of 64 has sigma 0.25.
  EXPECT_NEAR(documents / kBatch, 1.0 + SyntheticTask::kDocumentsPerSample, 0.8);
}

TEST(PackedDocuments, AFunctionOfSeedStepAndSampleOnly) {
  const SyntheticTask task = packed_task();
  const auto all = device_ids(task, 5, 0, 8);
  const auto last_four = device_ids(task, 5, 4, 4);  // another rank's share of the same samples
  for (index_t s = 0; s < 4; ++s)
    for (index_t p = 0; p < kSeqLen; ++p) ASSERT_EQ(all(s + 4, p), last_four(s, p));
  const auto next_step = device_ids(task, 6, 0, 8);
  bool differs = false;
  for (index_t s = 0; s < 8; ++s)
    for (index_t p = 0; p < kSeqLen; ++p) differs = differs || next_step(s, p) != all(s, p);
  EXPECT_TRUE(differs) << "the documents do not change with the step";
}

TEST(PackedDocuments, OneDocumentWithoutPacking) {
  SyntheticTask task = packed_task();
  task.documents = false;
  const auto ids = device_ids(task, 1, 0, 4);
  for (index_t s = 0; s < 4; ++s)
    for (index_t p = 0; p < kSeqLen; ++p) ASSERT_EQ(ids(s, p), 0);
  EXPECT_EQ(task.full_documents(1, 0, 4)(3, kSeqLen - 1), 0);
}

}  // namespace
}  // namespace miniattn
