// The attention tiles of a run, chosen per execution space (attention.hpp).
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "kernels/attention/fused/fused_tiles.hpp"
#include "kernels/attention/kernel_record.hpp"
#include "kernels/base/onednn_gemm.hpp"
#include "kernels/base/simd_bf16_dot.hpp"
#include "kernels/base/team_policy.hpp"

namespace miniattn::kernels {

namespace {

using namespace attention_detail;

template <class T>
std::size_t largest_pass_scratch(index_t qb, index_t kb, index_t dh) {
  return std::max(forward_scratch_bytes<T>(qb, kb, dh), backward_scratch_bytes<T>(qb, kb, dh));
}

// The tile of largest area (then most query rows) whose passes both fit level
// 0, sides from kTileSides unless requested (> 0); the smallest when none fits.
// Not square: forward scratch grows with the query rows, backward with the key rows.
template <class T>
AttentionBlocking largest_fitting_tile(const KernelConfig& requested, index_t dh, std::size_t level0_bytes) {
  const auto sides = [](std::int64_t given) {
    return given > 0 ? std::vector<index_t>{given} : std::vector<index_t>(kTileSides.begin(), kTileSides.end());
  };
  AttentionBlocking best{sides(requested.query_block).back(), sides(requested.key_block).back()};
  index_t best_area = 0;
  for (const index_t qb : sides(requested.query_block))
    for (const index_t kb : sides(requested.key_block))
      if (qb * kb > best_area && largest_pass_scratch<T>(qb, kb, dh) <= level0_bytes) {
        best = {qb, kb};
        best_area = qb * kb;
      }
  return best;
}

// The device kind of this build; a host build that emulates a GPU's limits
// in the tests (level1_is_global) chooses as a CUDA build would.
Backend backend_of(const TeamScratchLimits& limits) {
  if (!limits.level1_is_global) return Backend::host;
#if defined(KOKKOS_ENABLE_HIP)
  return Backend::hip;
#else
  return Backend::cuda;
#endif
}

// The fused kernel's bf16 products run on vdpbf16ps at twice the fp32 tile's
// rate, widened at half of it (tests/kernels/bench_bf16_dot.cpp, Zen 5): auto
// takes it where the core has bf16 dot products (and the run does not play a
// core without them) but no AMX, whose oneDNN GEMMs serve the gemm kernel at
// 0.73x the fp32 fused kernel's attention time (docs/results/2026-11-29-cpu-xeon.md),
// against which the fused kernel has not been measured on such a core.
bool fused_bf16_outruns_gemm() {
  return simd::bf16_dot_path() == simd::Bf16Dot::native && !onednn_bf16_gemm_on_amx();
}

// auto takes what the kernel records say (kernel_record.cpp), cudnn only
// where it can run on every rank; a named kernel must compute the run's
// precision, then pass its own checks (head width, device, library).
template <class T>
AttentionKernel resolved_kernel(AttentionKernel requested, index_t head_dim, const TeamScratchLimits& limits,
                                bool cudnn_on_every_rank) {
  if (requested == AttentionKernel::automatic) {
    const auto usable = [&](AttentionKernel k) {
      if (k == AttentionKernel::fused && std::is_same<T, bf16>::value) return fused_bf16_outruns_gemm();
      return k != AttentionKernel::cudnn || (cudnn_on_every_rank && cudnn_unavailable_reason_for(head_dim).empty());
    };
    return auto_attention_kernel(precision_of<T>(), backend_of(limits), usable);
  }
  const std::string refusal = attention_kernel_precision_refusal(requested, precision_of<T>());
  if (!refusal.empty()) throw InputError("kernels.attention: " + refusal);
  if (requested == AttentionKernel::cudnn) {
    const std::string reason = cudnn_unavailable_reason_for(head_dim);
    if (!reason.empty()) throw InputError("kernels.attention: cudnn: " + reason);
  }
  const std::string elsewhere = attention_kernel_backend_refusal(requested, precision_of<T>(), backend_of(limits));
  if (!elsewhere.empty()) throw InputError("kernels.attention: " + elsewhere);
  return requested;
}

}  // namespace

void route_documents(AttentionBlocking& blocking, bool documents, CudnnDocuments how) {
  const bool cudnn_documents = blocking.kernel == AttentionKernel::cudnn && documents;
  blocking.cudnn_document_calls = cudnn_documents && how == CudnnDocuments::calls;
  blocking.gemm_fallback = cudnn_documents && how == CudnnDocuments::gemm;
}

TeamScratchLimits TeamScratchLimits::of_backend() { return {level0_scratch_bytes(), !kHostExecution}; }

template <class T>
AttentionTiles choose_attention_tiles(const KernelConfig& requested, index_t head_dim,
                                      const TeamScratchLimits& limits, bool cudnn_on_every_rank) {
  using Tile = Acc<T>;  // what the fused kernel's tiles hold
  AttentionTiles tiles;
  tiles.blocking.kernel = resolved_kernel<T>(requested.attention, head_dim, limits, cudnn_on_every_rank);
  // The fused kernel's bf16 version: its own tiles, kept in buffers of each
  // host thread, not in team scratch (fused/bf16_tiles.hpp).
  const bool bf16_tiles = tiles.blocking.kernel == AttentionKernel::fused && std::is_same<T, bf16>::value;
  tiles.blocking.chunk = requested.chunk > 0 ? requested.chunk : limits.level1_is_global ? kDeviceChunk : kHostChunk;
  if (limits.level1_is_global) {
    const AttentionBlocking fitting = largest_fitting_tile<Tile>(requested, head_dim, limits.level0_bytes);
    tiles.blocking.query_block = fitting.query_block;
    tiles.blocking.key_block = fitting.key_block;
  } else {
    tiles.blocking.query_block =
        requested.query_block > 0 ? requested.query_block : bf16_tiles ? kHostBf16QueryRows : kHostTileRows;
    tiles.blocking.key_block =
        requested.key_block > 0 ? requested.key_block : bf16_tiles ? kHostBf16KeyRows : kHostTileRows;
  }
  const index_t qb = tiles.blocking.query_block, kb = tiles.blocking.key_block;
  tiles.forward_scratch_bytes = bf16_tiles ? 0 : forward_scratch_bytes<Tile>(qb, kb, head_dim);
  tiles.backward_scratch_bytes = bf16_tiles ? 0 : backward_scratch_bytes<Tile>(qb, kb, head_dim);
  tiles.level0_bytes = limits.level0_bytes;
  const std::size_t needed = std::max(tiles.forward_scratch_bytes, tiles.backward_scratch_bytes);
  if (tiles.blocking.kernel == AttentionKernel::fused && limits.level1_is_global && needed > limits.level0_bytes) {
    throw InputError("kernels.query_block, kernels.key_block: tiles of " + std::to_string(qb) + " x " +
                     std::to_string(kb) + " rows (head width " + std::to_string(head_dim) + ") need " +
                     std::to_string(needed) + " bytes of team scratch, but level 0 (on-chip) of this device holds " +
                     std::to_string(limits.level0_bytes) + "; give smaller tiles, or 0 to choose ones that fit");
  }
  tiles.scratch_level = needed <= limits.level0_bytes ? 0 : 1;
  return tiles;
}

namespace {

// Elements of each part of the workspace: the one count both the allocation
// and the memory plan use.
struct WorkspaceElements {
  index_t transposed = 0;   // each of K^T, V^T
  index_t chunk_pair = 0;   // each of the score and score-gradient blocks (bf16: scores and logits)
  index_t accumulator = 0;      // acc: the output, then dq (inputs narrower than their compute type)
  index_t key_accumulator = 0;  // each of dk_acc, dv_acc (the same; gemm: one key chunk, fused: every key)
  index_t key_chunk = 0;        // key rows of a gemm chunk pair
  index_t key_accumulator_rows = 0;
};

WorkspaceElements workspace_elements(const AttentionShape& s, const AttentionBlocking& blocking,
                                     bool separate_accumulators) {
  WorkspaceElements e;
  if (separate_accumulators) e.accumulator = s.batch * s.heads * s.queries * s.head_dim;
  const GemmChunkSides chunk = gemm_chunk_sides(blocking.chunk, s.queries, s.keys, separate_accumulators);
  e.key_chunk = std::min(chunk.keys, s.keys);
  if (separate_accumulators && blocking.runs_gemm()) e.key_accumulator_rows = e.key_chunk;
  if (separate_accumulators && blocking.kernel == AttentionKernel::fused) e.key_accumulator_rows = s.keys;
  e.key_accumulator = s.batch * s.kv_heads * e.key_accumulator_rows * s.head_dim;
  if (blocking.kernel == AttentionKernel::fused) {
    const TransposedKeyTiles tiles = transposed_key_tiles(s.keys, blocking.key_block);
    e.transposed = s.batch * s.kv_heads * tiles.tiles * s.head_dim * tiles.tile_ld;
  }
  if (blocking.runs_gemm())
    e.chunk_pair = s.batch * s.heads * std::min(chunk.queries, s.queries) * e.key_chunk;
  return e;
}

}  // namespace

template <class T>
AttentionWorkspace<T>::AttentionWorkspace(const AttentionShape& shape, const AttentionBlocking& blocking) {
  const WorkspaceElements e = workspace_elements(shape, blocking, !std::is_same<T, Acc<T>>::value);
  if (e.accumulator > 0) acc = View4<Acc<T>>("attention.acc", shape.batch, shape.heads, shape.queries, shape.head_dim);
  if (e.key_accumulator > 0) {
    dk_acc = View4<Acc<T>>("attention.dk_acc", shape.batch, shape.kv_heads, e.key_accumulator_rows, shape.head_dim);
    dv_acc = View4<Acc<T>>("attention.dv_acc", shape.batch, shape.kv_heads, e.key_accumulator_rows, shape.head_dim);
  }
  if (e.transposed > 0) {
    const TransposedKeyTiles tiles = transposed_key_tiles(shape.keys, blocking.key_block);
    const index_t rows = tiles.tiles * shape.head_dim;
    k_t = View4<T>("attention.k_transposed", shape.batch, shape.kv_heads, rows, tiles.tile_ld);
    v_t = View4<T>("attention.v_transposed", shape.batch, shape.kv_heads, rows, tiles.tile_ld);
  }
  if (e.chunk_pair > 0) {
    scores = View1<T>("attention.chunk_scores", e.chunk_pair);
    if (std::is_same<T, Acc<T>>::value) score_grads = View1<T>("attention.chunk_score_grads", e.chunk_pair);
    else logits = View1<Acc<T>>("attention.chunk_logits", e.chunk_pair);
  }
  if constexpr (std::is_same<T, bf16>::value)
    if (blocking.kernel == AttentionKernel::cudnn) cudnn = std::make_shared<CudnnBlocks>(shape, blocking);
}

template <class T>
std::size_t AttentionWorkspace<T>::bytes() const {
  return (k_t.span() + v_t.span() + scores.span() + score_grads.span()) * sizeof(T) +
         (logits.span() + acc.span() + dk_acc.span() + dv_acc.span()) * sizeof(Acc<T>) +
         (cudnn ? cudnn->bytes() : 0);
}

std::size_t attention_workspace_bytes(const AttentionShape& shape, const AttentionBlocking& blocking,
                                      std::size_t value_bytes, std::size_t acc_bytes) {
  const WorkspaceElements e = workspace_elements(shape, blocking, value_bytes != acc_bytes);
  return static_cast<std::size_t>(2 * e.transposed + e.chunk_pair) * value_bytes +
         static_cast<std::size_t>(e.chunk_pair) * acc_bytes +
         static_cast<std::size_t>(e.accumulator + 2 * e.key_accumulator) * acc_bytes +
         (blocking.kernel == AttentionKernel::cudnn ? cudnn_blocks_bytes(shape) + cudnn_workspace_bytes(shape, blocking)
                                                    : 0);
}

template <class T>
View4<Acc<T>> accumulator_of(const View4<T>& own, const View4<Acc<T>>& separate) {
  if constexpr (std::is_same<T, Acc<T>>::value) {
    (void)separate;
    return own;
  } else {
    for (int i = 0; i < 4; ++i)
      if (separate.extent(i) != own.extent(i))
        throw RuntimeFailure("attention: an accumulator does not have its tensor's shape");
    return separate;
  }
}

#define MINIATTN_INSTANTIATE_ATTENTION_WORKSPACE(T)                                                 \
  template struct AttentionWorkspace<T>;                                                           \
  template View4<Acc<T>> accumulator_of<T>(const View4<T>&, const View4<Acc<T>>&);
MINIATTN_INSTANTIATE_ATTENTION_WORKSPACE(float)
MINIATTN_INSTANTIATE_ATTENTION_WORKSPACE(double)
MINIATTN_INSTANTIATE_ATTENTION_WORKSPACE(bf16)
#undef MINIATTN_INSTANTIATE_ATTENTION_WORKSPACE
template AttentionTiles choose_attention_tiles<float>(const KernelConfig&, index_t, const TeamScratchLimits&, bool);
template AttentionTiles choose_attention_tiles<double>(const KernelConfig&, index_t, const TeamScratchLimits&, bool);
template AttentionTiles choose_attention_tiles<bf16>(const KernelConfig&, index_t, const TeamScratchLimits&, bool);

}  // namespace miniattn::kernels
