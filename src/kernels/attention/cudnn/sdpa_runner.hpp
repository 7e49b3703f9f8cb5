#pragma once
// What computes one planned call (sdpa_call.hpp): cuDNN's fused attention on
// an NVIDIA GPU (cudnn_graphs.hpp), or, in the tests, a host emulation of
// cuDNN's documented contract, so that the planner, the merge into the
// running accumulators and the fallback run on every backend. Pointers are the
// block's base pointers (the call's row offsets are the runner's business);
// q, k, v, out, dout, dq, dk, dv hold bf16 bits; stats and lse, fp32, are
// the call's rows only ([B, H, query_count], sdpa_call.hpp).
#include <cstddef>

#include "kernels/attention/cudnn/sdpa_call.hpp"

namespace miniattn::kernels {

class SdpaRunner {
 public:
  virtual ~SdpaRunner() = default;
  // Device bytes of workspace the call needs (cuDNN: its graph's, built here
  // on first use; 0 for a runner without one). forward and backward take a
  // workspace of at least that many bytes.
  virtual std::size_t workspace_needed(const SdpaCallShape& shape, bool backward) = 0;
  // out (the call's rows, normalised) and stats (their natural-log LSE of the
  // scaled scores), both overwritten.
  virtual void forward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, void* out,
                       float* stats, void* workspace) = 0;
  // One call's share of the gradients given the GLOBAL output and LSE of its
  // queries (lse: its rows' global LSE): dq of its query rows, dk and dv of
  // its key rows, overwritten.
  virtual void backward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, const void* out,
                        const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace) = 0;
  // Graphs built so far (a runner without graphs: 0).
  virtual int graphs_built() const { return 0; }
};

}  // namespace miniattn::kernels
