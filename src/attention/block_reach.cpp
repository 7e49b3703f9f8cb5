#include "attention/block_reach.hpp"

#include <algorithm>

namespace miniattn {

kernels::AttentionMask attention_mask(const ModelConfig& model) {
  return kernels::AttentionMask(model.causal, model.window);
}

int ring_steps(const ModelConfig& model, Layout layout, int sp, int ulysses) {
  const index_t G = sp / ulysses, w = model.window;
  if (G <= 1 || w == 1) return 1;  // w = 1: every query sees itself only
  if (w == 0 || !model.causal || layout == Layout::zigzag) return static_cast<int>(G);
  const index_t run = layout == Layout::striped ? ulysses : ulysses * (model.seq_len / sp);
  const index_t farthest = (w - 1 + run - 1) / run;
  return static_cast<int>(std::min(G, 1 + farthest));
}

bool block_visible(const std::vector<index_t>& queries, std::vector<index_t> keys, const kernels::AttentionMask& mask) {
  if (keys.empty()) return false;
  std::sort(keys.begin(), keys.end());
  // The mask hides more the farther a key lies on either side of the query,
  // so the nearest key on each side decides. Documents change with the data:
  // only the positions decide here (the kernels skip what documents hide).
  for (const index_t q : queries) {
    const auto above = std::lower_bound(keys.begin(), keys.end(), q);
    if (above != keys.end() && !mask.hides_position(q, *above)) return true;
    if (above != keys.begin() && !mask.hides_position(q, *(above - 1))) return true;
  }
  return false;
}

std::vector<char> rows_seen_from(const View2<const index_t>& table, int own, const kernels::AttentionMask& mask) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  std::vector<std::vector<index_t>> rows(host.extent(0));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t i = 0; i < host.extent(1); ++i) rows[r].push_back(host(r, i));
  std::vector<char> sees;
  for (const auto& keys : rows) sees.push_back(block_visible(rows[static_cast<std::size_t>(own)], keys, mask));
  return sees;
}

}  // namespace miniattn
