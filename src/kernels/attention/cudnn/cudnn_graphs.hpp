#pragma once
// cuDNN's fused scaled-dot-product attention (SDPA) for one planned call
// (sdpa_call.hpp), through cudnn-frontend 1.23 (kernels.attention: cudnn).
// The only part of miniattn that includes cudnn-frontend: it is compiled once,
// into its own library (miniattn_cudnn), without Kokkos, so that this header
// names neither cuDNN nor Kokkos and the frontend's long compile happens once.
//
// libcudnn is not linked: it is loaded at run time (dlopen of libcudnn.so.9,
// the frontend's dynamic loading), so a build without a GPU or without the
// library still links, and validate_sdpa_graph runs wherever libcudnn.so.9
// loads, GPU or not.
#include <cstddef>
#include <memory>
#include <string>

#include "kernels/attention/cudnn/sdpa_call.hpp"

namespace miniattn::kernels {

// Why cuDNN's fused attention cannot run here ("" when it can): libcudnn.so.9
// not loadable (the message names the library and dlerror's reason), or its
// version below 9.10.2 (the frontend refuses 9.10.0/9.10.1 and bands without
// causal need 9.10.2). Loads the library once; later calls only read the result.
std::string cudnn_unavailable_reason();

// cudnnGetVersion() of the loaded library (e.g. 91900 for 9.19.0); 0 when it is not loaded.
long cudnn_library_version();

// Builds the forward (out + stats) or backward (dq, dk, dv; deterministic
// algorithm unless `deterministic` is false) SDPA graph of a call for
// sm_<sm_version> and runs validate() only: no GPU needed, only a loadable
// libcudnn. "" when valid, else the frontend's message (or cudnn_unavailable_reason()).
// shared_kernels: built as CudnnSdpa's shared_kernels builds them.
std::string validate_sdpa_graph(const SdpaCallShape& shape, bool backward, int sm_version,
                                bool deterministic = true, bool shared_kernels = false);

// Several sequences in one call: cuDNN's ragged ("THD") form with its
// padding mask, one graph for any lengths up to the graph's maxima (the
// lengths and the offsets are device arrays read at execution). Entry e reads
// query_counts[e] rows from query_offsets[e] elements into q, out, dout, dq,
// and key_counts[e] rows from key_offsets[e] elements into k, v, dk, dv; an
// entry's rows and heads lie row_stride and head_stride elements apart:
// miniattn's BHSD block in place (head stride rows x Dh, row stride Dh) or a
// packed [tokens, heads, Dh] copy (head stride Dh, row stride heads x Dh).
// Each entry is masked on its own: top-left causal, or not at all. Stats and
// LSE are [sequences, H, max_query_count] fp32, dense. Packed documents are
// what it is for (tests/attention/bench_cudnn_documents.cpp times it against
// a call per document); which strides cuDNN's kernels take is for a GPU to say.
struct SdpaRaggedShape {
  index_t sequences = 0, heads = 0, kv_heads = 0, head_dim = 0;
  index_t max_query_count = 0, max_key_count = 0;  // the graph's s_q, s_kv
  index_t query_head_stride = 0, query_row_stride = 0, key_head_stride = 0, key_row_stride = 0;
  bool causal = false;
};

// A ragged call's device arrays: int32 counts [sequences], int64 element offsets [sequences + 1].
struct SdpaRaggedRows {
  const void* query_counts = nullptr;
  const void* key_counts = nullptr;
  const void* query_offsets = nullptr;
  const void* key_offsets = nullptr;
};

// validate_sdpa_graph for a ragged call.
std::string validate_sdpa_ragged_graph(const SdpaRaggedShape& shape, bool backward, int sm_version,
                                       bool deterministic = true);

// Runs calls on one CUDA stream. Graphs are built per (shape minus the row
// offsets, direction) and cached: the offsets only move the pointers.
// Not thread-safe: one object per stream.
class CudnnSdpa {
 public:
  // cudnnCreate + cudnnSetStream (needs a GPU). cuda_stream is a cudaStream_t.
  // Throws std::runtime_error with the reason when cuDNN cannot run.
  // deterministic_backward false (kernels.deterministic: false) runs cuDNN's
  // faster backward that sums dQ with atomics: repeats may differ in the last bits.
  // shared_kernels: graphs are built with dynamic shapes and one kernel cache,
  // so that a graph of a new shape reuses the kernels of earlier ones (what a
  // call per packed document would need; bench_cudnn_documents times it).
  explicit CudnnSdpa(void* cuda_stream, bool deterministic_backward = true, bool shared_kernels = false);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // Builds the graph of (shape, direction) unless cached (validate,
  // build_operation_graph, create_execution_plans(heuristics mode A),
  // check_support, build_plans); returns its workspace bytes.
  std::size_t prepare(const SdpaCallShape& shape, bool backward);

  // q [B,H,query_rows,Dh], k, v [B,KV,key_rows,Dh] bf16 block base pointers
  // (the call's offsets are applied here); writes the call's rows of out
  // [B,H,query_rows,Dh] (bf16) and stats [B,H,query_rows] (fp32 natural-log
  // LSE of the scaled scores). workspace: prepare()'s bytes on the device.
  void forward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, void* out, float* stats,
               void* workspace);

  // out: the GLOBAL output [B,H,query_rows,Dh] and lse the GLOBAL fp32 LSE
  // [B,H,query_rows] of the queries, so that the call yields exactly its
  // keys' share of the gradients. Writes (overwrites) the call's rows of dq
  // [B,H,query_rows,Dh] and of dk, dv [B,KV,key_rows,Dh], bf16.
  void backward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, const void* out,
                const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace);

  // The same for ragged calls (SdpaRaggedShape); stats and lse [sequences, H, max_query_count].
  std::size_t prepare_ragged(const SdpaRaggedShape& shape, bool backward);
  void ragged_forward(const SdpaRaggedShape& shape, const SdpaRaggedRows& rows, const void* q, const void* k,
                      const void* v, void* out, float* stats, void* workspace);
  void ragged_backward(const SdpaRaggedShape& shape, const SdpaRaggedRows& rows, const void* q, const void* k,
                       const void* v, const void* out, const void* dout, const float* lse, void* dq, void* dk,
                       void* dv, void* workspace);

  // Graphs built so far (both directions, ragged ones included).
  int graphs_built() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace miniattn::kernels
