#pragma once
// Blockwise scaled-dot-product attention with an online softmax (flash-style):
// the n x N score matrix is never stored; a query tile meets one key tile at a
// time and keeps a running row maximum and row sum. The backward pass
// recomputes probabilities from the saved log-sum-exp.
//
// Layout: q, out, dq are [B, H, n, Dh], k, v, dk, dv [B, KV, n, Dh] (LayoutRight;
// KV divides H: query head h uses K/V head h / (H / KV), grouped-query
// attention, KV = H the usual multi-head case); row
// statistics (row_max, row_sum, lse, delta) are [B, H, n]. q_pos / k_pos give
// the GLOBAL sequence position of each local query / key row (the same for all
// samples and heads); the mask (AttentionMask) hides keys by position.
// scale = 1/sqrt(Dh).
//
// The accumulate functions take one block of keys at a time so that ring
// strategies can feed key/value blocks as they arrive from other ranks.
#include <array>
#include <cstddef>
#include <memory>

#include "core/deck_words.hpp"
#include "core/types.hpp"

namespace miniattn::kernels {

class CudnnBlocks;  // the cudnn kernel's state (attention/cudnn/cudnn_attention.hpp)

// Host tile rows: measured best with the host register tiles (fused/fused_tiles.hpp).
constexpr index_t kHostTileRows = 96;
// The fused kernel's bf16 version (fused/bf16_tiles.hpp): query x key tiles
// of 192 x 192 rows, the fastest of ten shapes in bench_attention and in the
// model's step on a Zen 5 (docs/results/2026-12-06-cpu-epyc-zen5.md).
constexpr index_t kHostBf16QueryRows = 192, kHostBf16KeyRows = 192;
// Chunk rows of the gemm kernel when kernels.chunk is 0. GPU: measured on an
// H200 (fp32, N = 32768, B = 1, H = 4, Dh = 64, forward+backward): chunks of
// 1024 / 2048 / 4096 rows ran 14.8 / 20.4 / 25.5 TFLOP/s full and 14.2 / 19.0 /
// 22.2 causal (bigger products, fewer launches); the workspace, 2 B H C^2
// values, is 0.5 GiB of fp32 at B H = 4.
constexpr index_t kHostChunk = 256;
constexpr index_t kDeviceChunk = 4096;
// Key rows of a gemm chunk pair of `chunk` query rows. Where the values are
// narrower than their compute type (bf16), a pair holds each score twice, S in
// Acc<T> and P in T: 6 bytes a score against fp32's 8, where P overwrites S
// and dS overwrites dP. Half the keys a pair make bf16's score workspace 3/8 of
// fp32's, not 3/4, so that it halves with the rest of bf16's memory: twice
// the pairs, each of GEMMs half as wide.
constexpr index_t gemm_key_chunk(index_t chunk, bool scores_kept_twice) {
  return scores_kept_twice ? (chunk + 1) / 2 : chunk;
}
// The query and key rows of a gemm chunk pair of nq queries against nk keys
// (the last chunks of a side may be shorter): a chunk longer than both sides
// is cut to the longer one before its keys are halved, so that the workspace
// sized from these sides is what the kernel uses.
struct GemmChunkSides {
  index_t queries, keys;
};
constexpr GemmChunkSides gemm_chunk_sides(index_t chunk, index_t nq, index_t nk, bool scores_kept_twice) {
  const index_t queries = chunk < nq || chunk < nk ? chunk : (nq > nk ? nq : nk);
  return {queries, gemm_key_chunk(queries, scores_kept_twice)};
}
// The rows of the tiles cuDNN's fused attention skips under a mask, as the
// performance model counts them: Hopper's FlashAttention-style kernels work on
// 128 x 128 tiles (an assumption: cuDNN does not publish its tiling).
constexpr index_t kCudnnTile = 128;
// The tile sides a GPU chooses from.
constexpr std::array<index_t, 6> kTileSides = {128, 96, 64, 48, 32, 16};

// Whether packed documents let queries see keys (AttentionMask::ranges_meet), from the document ids at the ends
// of the two ranges (ids do not decrease with the position).
KOKKOS_INLINE_FUNCTION bool documents_meet(index_t q_first, index_t q_last, index_t k_first, index_t k_last,
                                           bool& partly_masked) {
  if (k_last < q_first || k_first > q_last) return false;  // every key in another document
  partly_masked = partly_masked || q_first != q_last || k_first != k_last || q_first != k_first;
  return true;
}

// Which keys a query sees, by global position: with `causal` no key after the
// query; with `window` w > 0 only keys less than w positions away (before the
// query when causal, on either side otherwise), as in Mistral's sliding-window
// attention; with `documents` (packed documents) only keys of the query's own
// document: documents(b, p) is the document of global position p in sample b
// of the micro-batch, non-decreasing in p. A bool converts to the plain causal
// (true) or full (false) mask.
struct AttentionMask {
  bool causal = false;
  index_t window = 0;
  View2<const index_t> documents;  // [B, N], or empty: one document per sample
  AttentionMask(bool causal_mask = false, index_t window_width = 0) : causal(causal_mask), window(window_width) {}
  AttentionMask with_documents(const View2<const index_t>& ids) const {
    AttentionMask mask = *this;
    mask.documents = ids;
    return mask;
  }
  // By positions alone (the same for every sample).
  KOKKOS_INLINE_FUNCTION bool hides_position(index_t query, index_t key) const {
    if (causal && key > query) return true;
    return window > 0 && (query - key >= window || key - query >= window);
  }
  // In sample b. Tile padding past the sequence: a padding key is hidden, a
  // padding query hides nothing more than the position rule says.
  KOKKOS_INLINE_FUNCTION bool hides(index_t sample, index_t query, index_t key) const {
    if (hides_position(query, key)) return true;
    const index_t n = static_cast<index_t>(documents.extent(1));
    if (n == 0 || query >= n) return false;
    return key >= n || documents(sample, query) != documents(sample, key);
  }
  KOKKOS_INLINE_FUNCTION bool hides_any() const { return causal || window > 0 || documents.extent(1) > 0; }

  // Whether queries at positions [q_lo, q_hi] may see any key at [k_lo, k_hi]
  // by the position rules (false: every pair hidden), and whether some pair
  // may be hidden (partly_masked). Both answers err on the side of computing.
  KOKKOS_INLINE_FUNCTION bool ranges_meet(index_t q_lo, index_t q_hi, index_t k_lo, index_t k_hi,
                                          bool& partly_masked) const {
    const index_t near = q_lo - k_hi, far = q_hi - k_lo;  // the smallest and largest query - key distances
    partly_masked = (causal && near < 0) || (window > 0 && (far >= window || (!causal && -near >= window)));
    if (causal && far < 0) return false;  // every key after every query
    return !(window > 0 && (near >= window || (!causal && -far >= window)));  // or every key outside the window
  }
  // Both questions for sample b (documents at the ends of the ranges): a
  // block pair of one sample.
  KOKKOS_INLINE_FUNCTION bool blocks_meet(index_t sample, index_t q_lo, index_t q_hi, index_t k_lo, index_t k_hi,
                                          bool& partly_masked) const {
    partly_masked = false;
    if (!ranges_meet(q_lo, q_hi, k_lo, k_hi, partly_masked)) return false;
    if (documents.extent(1) == 0) return true;
    return documents_meet(documents(sample, q_lo), documents(sample, q_hi), documents(sample, k_lo),
                          documents(sample, k_hi), partly_masked);
  }
};


// How a run cuts attention into work (choose_attention_tiles resolves the
// deck's zeros and `auto`). fused: the tiled online-softmax kernels below,
// query_block x key_block tiles (both > 0). gemm: chunked attention through
// batched GEMMs (chunked_attention.cpp), score blocks of chunk query rows by
// gemm_key_chunk key rows for all heads at a time (chunk > 0; the last chunk of
// a sequence may be shorter).
struct AttentionBlocking {
  index_t query_block = 0;
  index_t key_block = 0;
  AttentionKernel kernel = AttentionKernel::fused;
  index_t chunk = 0;
  // cudnn: blocks cuDNN cannot express run the gemm kernel, whose chunk-pair
  // scratch the workspace then holds (packed documents, unless
  // cudnn_document_calls).
  bool gemm_fallback = false;
  // cudnn: blocks with packed documents run as cuDNN calls of one sample and
  // one document each (kernels.cudnn_documents: calls), not on the gemm kernel.
  bool cudnn_document_calls = false;
  // cudnn: cuDNN's deterministic backward (kernels.deterministic), and the
  // most query rows of one of its calls (0: no limit), which bounds the dS
  // that backward keeps for every pair of a call (the memory plan chooses it:
  // perf/memory_plan.hpp, plan_memory_within). The host kernels are
  // deterministic whatever this says.
  bool deterministic = true;
  index_t cudnn_rows_per_call = 0;
  // Whether the gemm kernel's scratch is needed.
  bool runs_gemm() const {
    return kernel == AttentionKernel::gemm || (kernel == AttentionKernel::cudnn && gemm_fallback);
  }
  // The fused backward's schedule (fused/fused_backward.cpp): one launch of
  // key-tile and query-tile teams (GPUs), or waves of block pairs (host: each
  // product once, a block's tiles in cache). Tests run both on every backend.
  bool one_launch_backward = !kHostExecution;
  // The fused kernel's bf16 products widened to fp32 even where the core has
  // bf16 dot products (kernels/base/simd_bf16_dot.hpp; MINIATTN_BF16_DOT=widened
  // does it for a whole run): the tests hold the two paths bitwise equal.
  bool widened_bf16_dot = false;
  // The query and key rows of the unit of work a mask may skip whole
  // (narrow_values: bf16, whose gemm pairs take half the keys).
  index_t query_tile() const { return kernel == AttentionKernel::gemm ? chunk : tile(query_block); }
  index_t key_tile(bool narrow_values) const {
    return kernel == AttentionKernel::gemm ? gemm_key_chunk(chunk, narrow_values) : tile(key_block);
  }

 private:
  index_t tile(index_t fused_side) const { return kernel == AttentionKernel::cudnn ? kCudnnTile : fused_side; }
};

// The tiles a run uses and the team scratch they need. A GPU team's scratch
// must fit level 0 (on-chip shared memory, TeamPolicy::scratch_size_max(0));
// Kokkos would put more in level 1, global memory, so such tiles are refused,
// never run slowly in silence. Host backends keep both levels in the same
// thread-private memory, so host tiles are sized for the caches and register
// tiles instead and may use level 1.
struct AttentionTiles {
  AttentionBlocking blocking;
  std::size_t forward_scratch_bytes = 0, backward_scratch_bytes = 0;
  std::size_t level0_bytes = 0;  // scratch_size_max(0) of this backend
  int scratch_level = 0;         // the level both passes run with
};

// What the execution space offers a team.
struct TeamScratchLimits {
  std::size_t level0_bytes = 0;    // TeamPolicy::scratch_size_max(0)
  bool level1_is_global = false;   // true on GPUs: level 1 lives in global memory
  static TeamScratchLimits of_backend();
};

// requested.attention auto: the kernel records' choice (kernel_record.cpp);
// cudnn only where it loads here and cudnn_on_every_rank says the other
// ranks can run it too (a run agrees on it first: the choice must be one).
// chunk 0: kHostChunk / kDeviceChunk.
// requested: kernels.query_block / kernels.key_block, 0 = chosen for the
// execution space (host: kHostTileRows; GPU: the query x key tile of sides
// from kTileSides with the largest area whose forward and backward scratch
// both fit level 0). Throws InputError naming the keys when tiles do not fit
// level 0 where level 1 is global memory.
template <class T>
AttentionTiles choose_attention_tiles(const KernelConfig& requested, index_t head_dim,
                                      const TeamScratchLimits& limits = TeamScratchLimits::of_backend(),
                                      bool cudnn_on_every_rank = true);

// How the cudnn kernel runs a run's blocks with packed documents
// (kernels.cudnn_documents): as calls of one document each, or on the gemm
// fallback, whose scratch the workspace then holds. Other kernels: unchanged.
void route_documents(AttentionBlocking& blocking, bool documents, CudnnDocuments how);

// The shapes a strategy feeds the kernels: at most `queries` query rows of
// `heads` heads and `keys` key rows of `kv_heads` K/V heads per call.
struct AttentionShape {
  index_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, queries = 0, keys = 0;
};

// The kernels' scratch memory, allocated once per run for what blocking.kernel
// uses: fused: the key block's K and V transposed for the backward, key tile
// by key tile (TransposedKeyTiles), written once per call so that no tile pair
// transposes a tile again; gemm: one chunk pair's scores (then
// probabilities) and score gradients for every head, B H Cq Ck values each
// (Cq = min(chunk, queries), Ck = min(gemm_key_chunk, keys)): O(chunk^2) per
// head, never O(N^2). When T computes in a wider type (bf16): the gemm kernel's scores,
// then score gradients dP, in Acc<T> (`logits`; a bf16 score rounds by up to
// 2^-9 of its size, which blurs a head that must pick one key among
// thousands: chunked_attention.cpp) and its probabilities, then dS, in T
// (`scores`); and an Acc<T> accumulator
// [B, H, queries, Dh] for the running output in the forward pass and for dq in
// the backward pass (they never overlap), and, gemm, a key chunk's dk and dv
// in Acc<T>, [B, KV, Ck, Dh] each, added to the caller's dk, dv
// (which travel as T) with one rounding per key chunk (fp32 and fp64
// accumulate in the caller's out, dq, dk and dv).
// The fused backward's K^T (and V^T) of one K/V head: key tile kt (key_block
// keys) is the contiguous [Dh][tile_ld] block at rows kt Dh .. kt Dh + Dh - 1
// of a [tiles Dh, tile_ld] matrix, one stream of reads for the team that
// reads it (host teams read it in place: fused_tiles.hpp, kStageKeyTiles).
// Transposed over all n_k keys, a tile's Dh rows had lain 4 n_k bytes apart.
// Rows of whole 64-byte lines.
struct TransposedKeyTiles {
  index_t tiles = 0, tile_ld = 0;
};
inline TransposedKeyTiles transposed_key_tiles(index_t keys, index_t key_block) {
  const index_t kb = key_block > 0 && key_block < keys ? key_block : (keys > 0 ? keys : 1);
  return {(keys + kb - 1) / kb, (kb + 15) / 16 * 16};
}
template <class T>
struct AttentionWorkspace {
  View4<T> k_t, v_t;                  // fused
  View1<T> scores, score_grads;       // gemm (bf16: scores only)
  View1<Acc<T>> logits;               // gemm, bf16
  View4<Acc<T>> acc;                 // bf16: out, then dq
  View4<Acc<T>> dk_acc, dv_acc;       // bf16, gemm
  std::shared_ptr<CudnnBlocks> cudnn; // cudnn: a call's outputs, the block plans, the runner
  AttentionWorkspace() = default;
  AttentionWorkspace(const AttentionShape& shape, const AttentionBlocking& blocking);
  std::size_t bytes() const;
};
// What AttentionWorkspace<T> allocates for `shape` (the memory plan), T
// described by its size and its compute type's (equal unless T is bf16).
std::size_t attention_workspace_bytes(const AttentionShape& shape, const AttentionBlocking& blocking,
                                      std::size_t value_bytes, std::size_t acc_bytes);

// own itself when T computes in T, else `separate`, an Acc<T> View of own's
// shape (checked): where a tensor of T is accumulated.
template <class T>
View4<Acc<T>> accumulator_of(const View4<T>& own, const View4<Acc<T>>& separate);

// The running output or the dq accumulator of a call: out / dq themselves when
// T computes in T, else the workspace's Acc<T> buffer (of out's / dq's shape).
template <class T>
View4<Acc<T>> accumulator_of(const View4<T>& own, const AttentionWorkspace<T>& workspace) {
  return accumulator_of<T>(own, workspace.acc);
}

// out_acc = 0, row_max = -inf, row_sum = 0 (A: the accumulators' type, Acc<T>).
template <class A>
void attention_forward_init(const View4<A>& out_acc, const View3<A>& row_max, const View3<A>& row_sum);

// What one call for a block of keys takes beside its tensors: the global
// positions of q's and k's rows, the mask they are judged by, and how the
// kernels cut the work.
struct AttentionScope {
  View1<const index_t> q_pos, k_pos;
  AttentionMask mask;
  AttentionBlocking blocking;
};

// Folds keys/values k, v (any number of rows) into the running state.
// out_acc holds the unnormalised weighted sum of values, rescaled to row_max;
// it and the statistics are Acc<T> (fp32 for bf16 inputs).
template <class T>
void attention_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                  const AttentionScope& scope, const View4<Acc<T>>& out_acc,
                                  const View3<Acc<T>>& row_max, const View3<Acc<T>>& row_sum,
                                  const AttentionWorkspace<T>& workspace);

// out = out_acc / row_sum (out may be out_acc itself), lse = row_max + log(row_sum).
// A row that saw no unmasked key gets out = 0 and lse = -inf.
template <class T>
void attention_forward_finalize(const View4<const Acc<T>>& out_acc, const View3<const Acc<T>>& row_max,
                                const View3<const Acc<T>>& row_sum, const View3<Acc<T>>& lse, const View4<T>& out);

// Whole attention on local data: init + one accumulate + finalize.
// row_sum is workspace [B, H, n]; lse receives the log-sum-exp (also used as row_max workspace).
template <class T>
void attention_forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                       const AttentionScope& scope, const View4<T>& out, const View3<Acc<T>>& lse,
                       const View3<Acc<T>>& row_sum, const AttentionWorkspace<T>& workspace);

// delta[b,h,i] = sum_d dout[b,h,i,d] * out[b,h,i,d]
template <class T>
void attention_backward_delta(const View4<const T>& out, const View4<const T>& dout, const View3<Acc<T>>& delta);

// Adds this key block's contribution to dq, dk, dv (all accumulated with +=),
// given the queries' whole output `out` (cudnn recomputes delta from it):
//   P = exp(scale q k^T - lse) (masked), dv += P^T dout,
//   dS = P * (dout v^T - delta), dq += scale dS k, dk += scale dS^T q.
// dq accumulates in Acc<T> (accumulator_of); dk, dv in T (they
// travel a ring as T). No atomics: every sum runs in an order fixed by the
// tiling alone.
template <class T>
void attention_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                   const View4<const T>& out, const View4<const T>& dout,
                                   const View3<const Acc<T>>& lse,
                                   const View3<const Acc<T>>& delta, const AttentionScope& scope,
                                   const View4<Acc<T>>& dq, const View4<T>& dk,
                                   const View4<T>& dv, const AttentionWorkspace<T>& workspace);

// x = acc rounded to T (nothing to do when they are the same View): an
// output or dq accumulated in Acc<T> handed on as T.
template <class T>
void round_accumulator(const View4<const Acc<T>>& acc, const View4<T>& x);

// Rows first .. first + rows - 1 of each head of x += rows 0 .. rows - 1 of
// each head of acc, rounded to T once: key gradients a kernel summed in Acc<T>
// (the gemm kernel's key chunks, the fused bf16 kernel's whole call) added to
// the dk, dv that travel as T.
template <class T>
void add_rounded_rows(const View4<const Acc<T>>& acc, index_t first, index_t rows, const View4<T>& x);

}  // namespace miniattn::kernels
