// The index map bench_cudnn_documents hands cuDNN's ragged calls
// (ragged_documents.hpp), checked on the host: only a GPU runs the calls, so
// this is where a wrong offset would otherwise go unseen. cuDNN's addressing
// (a sequence's offset, then head and row strides) must reach every element
// of every document exactly once, at the element the block's own layout puts
// it, for miniattn's block in place and for the packed copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "ragged_documents.hpp"

namespace miniattn::bench {
namespace {

constexpr index_t kSamples = 2, kHeads = 3, kRows = 50, kDh = 8;

// Every position of every sample in exactly one document.
void expect_tiling(const std::vector<Document>& documents, index_t samples, index_t n) {
  std::vector<int> seen(static_cast<std::size_t>(samples * n), 0);
  for (const Document& d : documents) {
    ASSERT_GE(d.first, 0);
    ASSERT_LE(d.first + d.count, n);
    for (index_t p = d.first; p < d.first + d.count; ++p) ++seen[static_cast<std::size_t>(d.sample * n + p)];
  }
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i / n << " position " << i % n;
}

TEST(RaggedDocuments, DocumentsTileEverySample) {
  expect_tiling(documents_of_length(kSamples, kRows, 16), kSamples, kRows);
  expect_tiling(documents_of_length(1, 4096, 512), 1, 4096);
  EXPECT_EQ(documents_of_length(1, 4096, 512).size(), 8u);
  const std::vector<Document> drawn = documents_of_random_length(kSamples, 1000, 40);
  expect_tiling(drawn, kSamples, 1000);
  for (const Document& d : drawn) {
    EXPECT_GE(d.count, 2) << "cuDNN's backward refuses one query against one key";
    EXPECT_LT(d.count, 60 + 2);
  }
}

// Each element reached through ragged_element: counted, and compared with
// where `layout` puts it; bucketed, the empty sequences after the documents
// reach nothing and keep the offsets from decreasing.
void expect_every_element_once(const std::vector<Document>& documents, const BlockStrides& strides,
                               const std::function<std::int64_t(index_t, index_t, index_t, index_t)>& layout,
                               bool bucketed = false) {
  const RaggedRows rows = ragged_rows(documents, strides, bucketed);
  const std::size_t sequences = bucketed ? static_cast<std::size_t>(power_of_two_at_least(static_cast<index_t>(documents.size())))
                                         : documents.size();
  ASSERT_EQ(rows.counts.size(), sequences);
  ASSERT_EQ(rows.offsets.size(), sequences + 1);
  for (std::size_t e = documents.size(); e < sequences; ++e) {
    EXPECT_EQ(rows.counts[e], 0) << "padding sequence " << e;
    EXPECT_EQ(rows.offsets[e], rows.offsets[e + 1]) << "padding sequence " << e;
  }
  if (bucketed) {
    EXPECT_EQ(rows.longest, power_of_two_at_least(rows.longest));
  }
  std::vector<int> reached(static_cast<std::size_t>(kSamples * kHeads * kRows * kDh), 0);
  for (std::size_t e = 0; e < documents.size(); ++e) {
    const Document& doc = documents[e];
    EXPECT_EQ(rows.counts[e], doc.count);
    EXPECT_LE(doc.count, rows.longest);
    EXPECT_LT(rows.offsets[e], rows.offsets[e + 1]) << "offsets must increase";
    for (index_t h = 0; h < kHeads; ++h)
      for (index_t s = 0; s < doc.count; ++s)
        for (index_t d = 0; d < kDh; ++d) {
          const std::int64_t at = ragged_element(rows, strides, static_cast<index_t>(e), h, s, d);
          ASSERT_EQ(at, layout(doc.sample, h, doc.first + s, d)) << "document " << e << " head " << h << " row " << s;
          ++reached[static_cast<std::size_t>(at)];
        }
  }
  for (std::size_t i = 0; i < reached.size(); ++i) ASSERT_EQ(reached[i], 1) << "element " << i;
}

TEST(RaggedDocuments, InPlaceRowsAreTheBlocksOwn) {
  // miniattn's [B, H, N, Dh] View (LayoutRight).
  const auto block = [](index_t b, index_t h, index_t p, index_t d) {
    return ((b * kHeads + h) * kRows + p) * kDh + d;
  };
  const BlockStrides strides = in_place_strides(kHeads, kRows, kDh);
  // 10 documents: bucketed to 16 sequences, 6 of them empty.
  ASSERT_EQ(documents_of_length(kSamples, kRows, 12).size(), 10u);
  for (bool bucketed : {false, true}) {
    expect_every_element_once(documents_of_length(kSamples, kRows, 12), strides, block, bucketed);
    expect_every_element_once(documents_of_length(kSamples, kRows, 16), strides, block, bucketed);
    expect_every_element_once(documents_of_random_length(kSamples, kRows, 7), strides, block, bucketed);
  }
}

TEST(RaggedDocuments, PackedRowsAreTokensHeadsValues) {
  const auto packed = [](index_t b, index_t h, index_t p, index_t d) {
    return ((b * kRows + p) * kHeads + h) * kDh + d;
  };
  const BlockStrides strides = packed_strides(kHeads, kRows, kDh);
  for (bool bucketed : {false, true}) {
    expect_every_element_once(documents_of_length(kSamples, kRows, 12), strides, packed, bucketed);
    expect_every_element_once(documents_of_length(kSamples, kRows, 16), strides, packed, bucketed);
    expect_every_element_once(documents_of_random_length(kSamples, kRows, 7), strides, packed, bucketed);
  }
  // The packed copy's rows follow one another: the last offset is where the block ends.
  EXPECT_EQ(ragged_rows(documents_of_length(kSamples, kRows, 16), strides).offsets.back(),
            kSamples * kRows * kHeads * kDh);
}

}  // namespace
}  // namespace miniattn::bench
