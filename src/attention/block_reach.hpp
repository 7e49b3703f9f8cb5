#pragma once
// What a mask lets a rank's queries reach: ring and all-gather attention skip
// the key blocks a sliding window hides whole, and a ring stops once no rank
// needs a block from farther round it.
#include <vector>

#include "core/config.hpp"
#include "core/types.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// The model's mask (model.causal, model.window).
kernels::AttentionMask attention_mask(const ModelConfig& model);

// The ring steps ring attention over G = sp / ulysses groups needs under the
// model's mask: 1 + the farthest distance (g - source) mod G at which some
// group's queries see the source's keys. All G without a window or when not
// causal (the block of group g + 1 comes last); with a causal window w >= 2:
// contiguous groups of c = ulysses x seq_len / sp positions need
// 1 + ceil((w - 1) / c), striped 1 + ceil((w - 1) / ulysses), zigzag all G
// (a group's upper chunk needs the one of group g + 1); at most G. w = 1: 1.
int ring_steps(const ModelConfig& model, Layout layout, int sp, int ulysses);

// Whether the mask lets some query position see some key position (exact;
// positions in any order).
bool block_visible(const std::vector<index_t>& queries, std::vector<index_t> keys, const kernels::AttentionMask& mask);

// sees[g]: whether the queries of row `own` of a [G, m] positions table (one
// row per rank of a ring or all-gather group) see some key of row g.
std::vector<char> rows_seen_from(const View2<const index_t>& table, int own, const kernels::AttentionMask& mask);

}  // namespace miniattn
