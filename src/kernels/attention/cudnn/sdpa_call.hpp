#pragma once
// One planned cuDNN call (block_plan.hpp) on a block's tensors, as the graph
// that computes it sees them. The block's tensors are head-major and
// row-major, as everywhere in miniattn: q, out, dout, dq [B, H, query_rows, Dh],
// k, v, dk, dv [B, KV, key_rows, Dh]. A call reads and writes rows
// [call.query_offset, + query_count) and [call.key_offset, + key_count) of
// them in place through their strides: no copy. Its statistics (the LSE, fp32)
// are its rows' only, [B, H, query_count]: an fp32 row offset would move the
// base off the 16-byte alignment cuDNN's loads want, a bf16 row of Dh (a
// multiple of 8) values never does. A call of one sample (call.sample >= 0,
// packed documents) has batch 1 and reads and writes that sample's rows.
#include <cstdint>

#include "kernels/attention/cudnn/block_plan.hpp"

namespace miniattn::kernels {

struct SdpaCallShape {
  index_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;  // batch: the block's B, or 1 (a call of one sample)
  index_t query_rows = 0, key_rows = 0;  // rows of the block's tensors (their strides)
  CudnnCall call;                        // the rows it reads and writes, its mask
};

// The first sample a call reads and writes.
inline index_t first_sample(const SdpaCallShape& s) { return s.call.sample < 0 ? 0 : s.call.sample; }

// The element offsets of a call's first rows in its tensors.
inline index_t query_element_offset(const SdpaCallShape& s) {
  return (first_sample(s) * s.heads * s.query_rows + s.call.query_offset) * s.head_dim;
}
inline index_t key_element_offset(const SdpaCallShape& s) {
  return (first_sample(s) * s.kv_heads * s.key_rows + s.call.key_offset) * s.head_dim;
}

}  // namespace miniattn::kernels
