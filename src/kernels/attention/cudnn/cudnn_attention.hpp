#pragma once
// The `cudnn` kernel of attention.hpp (kernels.attention: cudnn, bf16); the
// dispatch (kernels/attention/dispatch.cpp) calls it, the report reads its
// tally. A block (one strategy's queries against one
// block of keys) is planned once (block_plan.hpp) into calls cuDNN's fused
// attention expresses exactly, and each call runs through an SdpaRunner:
//   forward:  the call's normalised output O_c and its LSE s_c are merged into
//             the running fp32 accumulators as a block of row maximum s_c, row
//             sum 1 and weighted sum O_c (the online-softmax merge every
//             kernel here uses: out_acc, row_max, row_sum);
//   backward: the call's gradients given the GLOBAL output and LSE (the rule
//             of ring-flash-attention and Transformer Engine: exp(s - lse) is
//             then the call's share of the global probabilities), added to
//             dq's fp32 accumulator; a block's calls' dk, dv summed in fp32
//             and added to the travelling bf16 dk, dv with one rounding per
//             block (the gemm kernel rounds once per key chunk).
// A block with packed documents runs as calls of one sample and one document
// each (block_plan.hpp: blocking.cudnn_document_calls, kernels.cudnn_documents:
// calls), or on the gemm kernel whole. cuDNN's workspace is allocated once, from
// the memory plan. A backward call of one query and one key, which cuDNN
// refuses, is computed by a small kernel of its own. Calls run in plan order: the same
// bits on every run.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention/attention.hpp"
#include "kernels/attention/cudnn/block_plan.hpp"
#include "kernels/attention/cudnn/sdpa_runner.hpp"

namespace miniattn::kernels {

// What a process gave to cuDNN and to the gemm fallback so far (the report).
struct CudnnTally {
  std::int64_t blocks = 0, calls = 0, fallback_blocks = 0;
  std::int64_t cut_calls = 0;  // calls that cudnn_rows_per_call added (block_plan.hpp)
  int graphs = 0;
  // Of the last CudnnBlocks made (a run makes one):
  std::size_t workspace_planned_bytes = 0;  // cudnn_workspace_bytes: what the memory plan counted
  std::size_t workspace_needed_bytes = 0;   // the most any call's graph asked for
  std::size_t workspace_bytes = 0;          // what is allocated: the plan's, or more where a graph needed more
};
CudnnTally cudnn_tally();

// Why the cudnn kernel cannot compute bf16 attention of this head width here
// ("" when it can; its precision is its record's, kernel_record.cpp): a head
// width that is a multiple of 8 and at most 256; a build
// with cuDNN; libcudnn loadable at run time, of version 9.10.2 or later
// (cudnn_graphs.hpp).
std::string cudnn_unavailable_reason_for(index_t head_dim);

// cudnnGetVersion() of the library loaded (91900 for 9.19.0), 0 without one.
long cudnn_version();

// The runner of this build, one a process for each backward algorithm:
// cuDNN on the default execution space's stream where miniattn was built
// with it (MINIATTN_HAVE_CUDNN), else null. Its backward is cuDNN's
// deterministic algorithm (dQ reduced without atomics through a bf16 dS of
// every pair of a call) or, deterministic_backward false, its default one
// (dQ summed with fp32 atomics: repeats may differ in the last bits).
std::shared_ptr<SdpaRunner> default_sdpa_runner(bool deterministic_backward);

// cuDNN's workspace for one call of query_rows x key_rows rows of a block of
// `shape` (per sample and head), as cudnn-frontend 1.23 sizes its graphs
// (scaled_dot_product_flash_attention.h): deterministic, the dP-workspace
// backward's bf16 dS of every pair, b h ceil64(s_q) ceil64(s_kv) 2 bytes, and
// its fp32 softmax sums; otherwise its fp32 dQ accumulator, b h s_q Dh 4
// bytes, and the sums; 256 bytes more (measured on an H200, 2026-11-28,
// deterministic at N = 32768, H = 4: 8590459136 bytes, the formula's to the byte).
std::size_t cudnn_call_workspace_bytes(const AttentionShape& shape, index_t query_rows, index_t key_rows,
                                       bool deterministic);
// The workspace the cudnn kernel allocates for blocks of `shape`: the largest
// call's, with calls cut to blocking.cudnn_rows_per_call query rows.
std::size_t cudnn_workspace_bytes(const AttentionShape& shape, const AttentionBlocking& blocking);

// The cudnn kernel's state for one block shape (AttentionWorkspace<bf16>::cudnn):
// where a call's outputs land before they are merged, the plans of the blocks
// met so far (positions are never written after the run's setup) and the runner.
class CudnnBlocks {
 public:
  CudnnBlocks(const AttentionShape& shape, const AttentionBlocking& blocking);
  std::shared_ptr<SdpaRunner> runner;  // default_sdpa_runner(); tests put an emulation here
  View4<bf16> rows;                    // a call's out (forward), then its dq (backward): [B, H, queries, Dh]
  View1<float> stats;                  // a call's LSE, or its rows' global LSE: [B, H, its rows]
  View4<bf16> dk, dv;                  // a call's dk, dv [B, KV, keys, Dh]
  View4<float> dk_sum, dv_sum;         // a block's calls' dk, dv summed before the one rounding
  // The plan of a block of `samples` samples (their documents, if any).
  const BlockPlan& plan(const AttentionScope& scope, index_t samples);
  // cuDNN's workspace for the call (allocated from the plan; grown, and the
  // tally told, when a graph needs more than the plan counted).
  void* workspace_for(const SdpaCallShape& call, bool backward);
  std::size_t bytes() const;

 private:
  // Keyed by the positions' addresses: an entry keeps its Views, so that no
  // other positions can be allocated at an address it was planned for.
  using PlanKey = std::tuple<const index_t*, const index_t*, index_t, index_t, bool, index_t, bool>;
  struct Planned {
    BlockPlan plan;  // without documents, or the whole-block fallback of documents on the gemm kernel
    std::vector<index_t> q_host, k_host;
    View1<const index_t> q_pos, k_pos;
  };
  std::map<PlanKey, Planned> plans_;
  BlockPlan document_plan_;  // the last block's with documents planned as calls
  index_t rows_per_call_ = 0;
  bool documents_on_gemm_ = false;
  View1<unsigned char> workspace_;
};
// What CudnnBlocks allocates beside cuDNN's workspace (cudnn_workspace_bytes).
std::size_t cudnn_blocks_bytes(const AttentionShape& shape);

void cudnn_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k, const View4<const bf16>& v,
                              const AttentionScope& scope, const View4<float>& out_acc, const View3<float>& row_max,
                              const View3<float>& row_sum, const AttentionWorkspace<bf16>& workspace);

void cudnn_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k, const View4<const bf16>& v,
                               const View4<const bf16>& out, const View4<const bf16>& dout,
                               const View3<const float>& lse, const View3<const float>& delta,
                               const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                               const View4<bf16>& dv, const AttentionWorkspace<bf16>& workspace);

}  // namespace miniattn::kernels
