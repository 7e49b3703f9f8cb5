#pragma once
// Packed documents of a [B, H, N, Dh] block as the rows of one ragged cuDNN
// call (cudnn_graphs.hpp: SdpaRaggedShape), for bench_cudnn_documents: each
// document of each sample is a sequence of the call. Plain host code, so that
// the index map a GPU runs is checked here (test_ragged_documents.cpp).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/index.hpp"

namespace miniattn::bench {

// Positions [first, first + count) of one sample.
struct Document {
  index_t sample = 0, first = 0, count = 0;
};

// Documents of `length` positions tiling n in each sample (the last one shorter where length does not divide n).
inline std::vector<Document> documents_of_length(index_t samples, index_t n, index_t length) {
  std::vector<Document> documents;
  for (index_t b = 0; b < samples; ++b)
    for (index_t first = 0; first < n; first += length) documents.push_back({b, first, std::min(length, n - first)});
  return documents;
}

// Documents of lengths drawn uniformly from [mean / 2, 3 mean / 2) tiling n in
// each sample (fixed seed); a remainder under 2 positions joins the document
// before it, since cuDNN's backward refuses a call of one query and one key.
inline std::vector<Document> documents_of_random_length(index_t samples, index_t n, index_t mean) {
  std::mt19937_64 draw(7);
  std::uniform_int_distribution<index_t> length(std::max<index_t>(2, mean / 2), std::max<index_t>(2, 3 * mean / 2 - 1));
  std::vector<Document> documents;
  for (index_t b = 0; b < samples; ++b) {
    for (index_t first = 0; first < n;) {
      index_t count = std::min(length(draw), n - first);
      if (n - first - count < 2) count = n - first;
      documents.push_back({b, first, count});
      first += count;
    }
  }
  return documents;
}

// Where element (sample, head, position, value) of a block lies, in elements.
struct BlockStrides {
  index_t sample = 0, head = 0, row = 0;
  index_t element(index_t b, index_t h, index_t p, index_t d) const { return b * sample + h * head + p * row + d; }
};

// miniattn's own [B, H, N, Dh] block, which the ragged call reads in place.
inline BlockStrides in_place_strides(index_t heads, index_t n, index_t dh) { return {heads * n * dh, n * dh, dh}; }

// A packed [B, N, H, Dh] copy (cuDNN's THD: tokens, heads, values).
inline BlockStrides packed_strides(index_t heads, index_t n, index_t dh) { return {n * heads * dh, dh, heads * dh}; }

// The call's device arrays on the host: lengths, and each document's first
// element (one more entry: where the last document's rows end). `longest`
// is the graph's s_q = s_kv.
struct RaggedRows {
  std::vector<std::int32_t> counts;
  std::vector<std::int64_t> offsets;
  index_t longest = 0;
};

inline index_t power_of_two_at_least(index_t x) {
  index_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// bucketed: the sequences padded with empty ones to a power of two and the
// longest rounded up to one, so that one graph serves every set of documents
// of the same bucket (whether cuDNN takes empty sequences, a GPU says).
inline RaggedRows ragged_rows(const std::vector<Document>& documents, const BlockStrides& strides,
                              bool bucketed = false) {
  RaggedRows rows;
  for (const Document& d : documents) {
    rows.counts.push_back(static_cast<std::int32_t>(d.count));
    rows.offsets.push_back(strides.element(d.sample, 0, d.first, 0));
    rows.longest = std::max(rows.longest, d.count);
  }
  if (documents.empty()) return rows;
  const Document& last = documents.back();
  const std::int64_t end = strides.element(last.sample, 0, last.first + last.count, 0);
  if (bucketed) {
    const std::size_t sequences = static_cast<std::size_t>(power_of_two_at_least(static_cast<index_t>(documents.size())));
    rows.counts.resize(sequences, 0);
    rows.offsets.resize(sequences, end);
    rows.longest = power_of_two_at_least(rows.longest);
  }
  rows.offsets.push_back(end);
  return rows;
}

// The element cuDNN's ragged addressing reads for (sequence e, head h, row s,
// value d): the sequence's offset, then the head and row strides.
inline std::int64_t ragged_element(const RaggedRows& rows, const BlockStrides& strides, index_t e, index_t h,
                                   index_t s, index_t d) {
  return rows.offsets[static_cast<std::size_t>(e)] + h * strides.head + s * strides.row + d;
}

}  // namespace miniattn::bench
