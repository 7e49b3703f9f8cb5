// The tensor-core kernel's backward pass (tensor_core_attention.hpp), two
// launches as in FlashAttention-2 without its atomics:
//   key gradients: a team per 64 key rows of one (sample, K/V head), staged
//     in shared memory; each warp keeps its 16 keys' dK, dV accumulators in
//     registers and walks every query block of the K/V head's query heads
//     (Q and dO blocks double-buffered, as the forward's K and V blocks):
//     S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - delta),
//     dV += P^T dO, dK += dS^T Q; dk, dv get the sums with one rounding.
//   query gradients: a team per 64 query rows of one (sample, head); each warp
//     keeps Q, dO and its dQ accumulator and walks every key block:
//     S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// P and dS are rounded to bf16 as the products' A operands, as the gemm
// kernel stores them; the scale multiplies dK and dQ once, at the end.
#include "kernels/attention/tensor_core/tensor_core_attention.hpp"

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/attention/tensor_core/tensor_core_warp.hpp"

namespace miniattn::kernels {

#if defined(KOKKOS_ENABLE_CUDA)
namespace {

using namespace tensor_core;

struct BackwardArgs {
  const bf16 *q, *k, *v, *dout;
  const float *lse, *delta;
  const index_t *q_pos, *k_pos;
  AttentionMask mask;
  float* dq;
  bf16 *dk, *dv;
  index_t heads, kv_heads, nq, nk;
  float scale, scale_log2;  // 1/sqrt(Dh), and times log2(e): scores in log2 units, for exp2
};

// ---------------------------------------------------------------------------
// Key gradients.

// A query block staged in shared memory: Q and dO row-major (read as n-major
// and as k-major operands), lse in log2 units (+inf where the row saw no key
// or does not exist: P = 0) and delta.
struct QueryBlock {
  bf16 *q, *dout;
  float *lse2, *delta;
};
// Shared memory: staged blocks 0 and 1 hold the team's K and V, 2 + 2 b and
// 3 + 2 b buffer b's Q and dO; after them each buffer's lse2 and delta. (A
// buffer is found from its number: an array of the two, indexed by it, lived
// in local memory.)
template <int Dh>
__device__ bf16* staged_block(uint4* shared, int i) {
  return reinterpret_cast<bf16*>(shared) + i * Widths<Dh>::block_bf16;
}
template <int Dh>
__device__ QueryBlock query_buffer(uint4* shared, int buffer) {
  float* const stats = reinterpret_cast<float*>(staged_block<Dh>(shared, 6)) + 2 * buffer * kTile;
  return {staged_block<Dh>(shared, 2 + 2 * buffer), staged_block<Dh>(shared, 3 + 2 * buffer), stats, stats + kTile};
}
template <int Dh>
constexpr int key_gradients_shared_bytes() {
  return 6 * Widths<Dh>::block_bf16 * static_cast<int>(sizeof(bf16)) + 4 * kTile * static_cast<int>(sizeof(float));
}

template <int Dh>
struct KeyRows {
  const bf16 *k, *v;  // the warp's 16 rows of the team's K and V in shared memory
  float dk[Widths<Dh>::n_tiles][mma::kCValues], dv[Widths<Dh>::n_tiles][mma::kCValues];
  index_t first;  // row of [B KV nk] of the warp's first key
  index_t valid;  // keys of the 16 that exist
};

// K and V stay in shared memory, loaded as A fragments for each query block:
// held in registers through the walk beside dK, dV and the scores, they did
// not fit (ptxas, sm_90, Dh = 128: 700 bytes spilled, dK and dV in local memory).
template <int Dh>
__device__ Range load_key_rows(const BackwardArgs& a, uint4* shared, KeyRows<Dh>& x) {
  const index_t first_key = warp_first_row();
  stage_rows<Dh>(a.k + blockIdx.y * a.nk * Dh, blockIdx.x * kTile, a.nk, staged_block<Dh>(shared, 0));
  stage_rows<Dh>(a.v + blockIdx.y * a.nk * Dh, blockIdx.x * kTile, a.nk, staged_block<Dh>(shared, 1));
  x.k = staged_block<Dh>(shared, 0) + warp_id() * mma::kRows * Widths<Dh>::rows_ld;
  x.v = staged_block<Dh>(shared, 1) + warp_id() * mma::kRows * Widths<Dh>::rows_ld;
  x.valid = rows_left(a.nk, first_key);
  x.first = blockIdx.y * a.nk + first_key;
  for (int j = 0; j < Widths<Dh>::n_tiles; ++j)
    for (int e = 0; e < mma::kCValues; ++e) x.dk[j][e] = x.dv[j][e] = 0.0f;
  return warp_rows_range(a.k_pos, a.nk);
}

template <int Dh>
__device__ void store_key_gradients(const BackwardArgs& a, const KeyRows<Dh>& x) {
  // Unrolled: a loop index into dk and dv would put them in local memory.
#pragma unroll
  for (int slot = 0; slot < kRowSlots; ++slot) {
    if (slot_row(slot) >= x.valid) continue;
#pragma unroll
    for (int j = 0; j < Widths<Dh>::n_tiles; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int e = 2 * slot + half;
        const index_t at = (x.first + slot_row(slot)) * Dh + j * mma::kCols + mma::c_element(lane_id(), e).col;
        a.dk[at] = bf16(static_cast<float>(a.dk[at]) + a.scale * x.dk[j][e]);
        a.dv[at] = bf16(static_cast<float>(a.dv[at]) + x.dv[j][e]);
      }
  }
}

// Query block `first_query` of head bh into a buffer: Q and dO copied
// asynchronously, the statistics by plain loads (lse is rewritten in log2 units).
template <int Dh>
__device__ void stage_query_block(const BackwardArgs& a, index_t bh, index_t first_query, const QueryBlock& b) {
  const float inf = compat::infinity<float>();
  const index_t rows = bh * a.nq * Dh;
  stage_rows_async<Dh>(a.q + rows, first_query, a.nq, b.q);
  stage_rows_async<Dh>(a.dout + rows, first_query, a.nq, b.dout);
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kThreads) {
    const index_t r = first_query + i;
    const bool exists = r < a.nq;
    b.lse2[i] = lse_log2(exists ? a.lse[bh * a.nq + r] : -inf);
    b.delta[i] = exists ? a.delta[bh * a.nq + r] : 0.0f;
  }
}

// Which pairs of the query block starting at first_query the mask hides from
// a warp's keys, as mma::hidden_c_values bits; queries at or past nq are hidden.
// (A function: with the lambda written inside add_query_block's conditional,
// CUDA 13.0's front end stopped on an internal assertion, il.c i_copy_expr_tree.)
__device__ std::uint32_t hidden_queries(const BackwardArgs& a, index_t sample, index_t first_query) {
  index_t pos[kRowSlots];
  lane_positions(a.k_pos, a.nk, pos);
  return mma::hidden_c_values<kTileN>(lane_id(), [&](int query, int slot) {
    return first_query + query >= a.nq || a.mask.hides(sample, a.q_pos[first_query + query], pos[slot]);
  });
}

template <int Dh>
__device__ void add_query_block(const BackwardArgs& a, index_t sample, const QueryBlock& b, index_t first_query,
                                bool partly, KeyRows<Dh>& x) {
  const int lane = lane_id();
  const std::uint32_t hidden = partly ? hidden_queries(a, sample, first_query) : 0u;
  const auto query = [&](int j, int e) { return j * mma::kCols + mma::c_element(lane, e).col; };
  Word rows[Widths<Dh>::k_steps][mma::kARegisters];
  Word operand[kTileK][mma::kARegisters];  // P^T, then dS^T (the fp32 P^T is not held beside dP^T)
  {
    float s[kTileN][mma::kCValues] = {};
    load_a_fragments_staged<Dh>(x.k, Widths<Dh>::rows_ld, rows);
    accumulate_product<Dh, kTileN>(rows, b.q, Widths<Dh>::rows_ld, s);  // S^T = K Q^T
    if (partly) hide_scores<kTileN>(hidden, s);
#pragma unroll
    for (int j = 0; j < kTileN; ++j)
#pragma unroll
      for (int e = 0; e < mma::kCValues; ++e)
        s[j][e] = exp2_flushed(fmaf(s[j][e], a.scale_log2, -b.lse2[query(j, e)]));
    as_a_fragments<kTileN>(s, operand);
  }
  accumulate_product_kmajor<kTile, Widths<Dh>::n_tiles>(operand, b.dout, Widths<Dh>::rows_ld, x.dv);  // dV += P^T dO
  float ds[kTileN][mma::kCValues] = {};
  load_a_fragments_staged<Dh>(x.v, Widths<Dh>::rows_ld, rows);
  accumulate_product<Dh, kTileN>(rows, b.dout, Widths<Dh>::rows_ld, ds);  // dP^T = V dO^T
#pragma unroll
  for (int j = 0; j < kTileN; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e)
      ds[j][e] = packed_value<kTileN>(operand, j, e) * (ds[j][e] - b.delta[query(j, e)]);
  as_a_fragments<kTileN>(ds, operand);
  accumulate_product_kmajor<kTile, Widths<Dh>::n_tiles>(operand, b.q, Widths<Dh>::rows_ld, x.dk);  // dK += dS^T Q
}

// The team walks the query blocks of every query head its K/V head serves
// (GQA: `group` passes), double-buffered; blocks the mask hides from all its
// keys are never staged. At Dh = 64 ptxas is asked for three teams an SM
// (168 registers, 20 bytes spilled; left to itself it takes 182, two teams):
// more warps to hide latency with, not yet timed against two.
template <int Dh>
__global__ void __launch_bounds__(kThreads, Dh == 64 ? 3 : 1) key_gradients_kernel(const BackwardArgs a) {
  extern __shared__ uint4 shared[];
  __shared__ Range parts[kWarps];
  const index_t sample = blockIdx.y / a.kv_heads, group = a.heads / a.kv_heads;
  const index_t first_head = sample * a.heads + (blockIdx.y % a.kv_heads) * group;
  KeyRows<Dh> x;
  share_warp_range(load_key_rows<Dh>(a, shared, x), parts);
  const auto visible = [&](index_t, index_t first_query, WarpView& warp) {
    return team_sees_block<false>(a.mask, sample, parts, a.q_pos, first_query, a.nq, warp);
  };
  const auto stage = [&](const VisibleBlock& block, int buffer) {
    stage_query_block<Dh>(a, first_head + block.pass, block.first, query_buffer<Dh>(shared, buffer));
  };
  const auto fold = [&](const VisibleBlock& block, int buffer) {
    if (block.warp.sees)
      add_query_block<Dh>(a, sample, query_buffer<Dh>(shared, buffer), block.first, block.warp.partly, x);
  };
  walk_visible_blocks(CopyingTeam{}, a.nq, kTile, group, visible, stage, fold);
  store_key_gradients<Dh>(a, x);
}

// ---------------------------------------------------------------------------
// Query gradients.

template <int Dh>
struct QueryGradientRows {
  Word q[Widths<Dh>::k_steps][mma::kARegisters], dout[Widths<Dh>::k_steps][mma::kARegisters];
  float dq[Widths<Dh>::n_tiles][mma::kCValues];
  float lse2[kRowSlots], delta[kRowSlots];
  index_t first, valid;
};

template <int Dh>
__device__ Range load_query_gradient_rows(const BackwardArgs& a, QueryGradientRows<Dh>& x) {
  const index_t first_query = warp_first_row();
  const float inf = compat::infinity<float>();
  x.valid = rows_left(a.nq, first_query);
  x.first = blockIdx.y * a.nq + first_query;
  load_a_fragments<Dh>(a.q + x.first * Dh, x.valid, x.q);
  load_a_fragments<Dh>(a.dout + x.first * Dh, x.valid, x.dout);
  // The rows' position range is taken here, in the statistics' loop, not by
  // warp_rows_range as the other kernels do: ptxas (sm_90, Dh = 64) then
  // needs 172 registers instead of 168, two teams an SM instead of three.
  Range rows = kNoRows;
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const bool exists = slot_row(slot) < x.valid;
    const index_t r = x.first + slot_row(slot);
    const float lse = exists ? a.lse[r] : -inf;
    x.lse2[slot] = lse_log2(lse);
    x.delta[slot] = exists ? a.delta[r] : 0.0f;
    if (exists) rows = with(rows, a.q_pos[first_query + slot_row(slot)]);
  }
  for (int j = 0; j < Widths<Dh>::n_tiles; ++j)
    for (int e = 0; e < mma::kCValues; ++e) x.dq[j][e] = 0.0f;
  return warp_range(rows);
}

template <int Dh>
__device__ void store_query_gradients(const BackwardArgs& a, const QueryGradientRows<Dh>& x) {
  for (int slot = 0; slot < kRowSlots; ++slot) {
    if (slot_row(slot) >= x.valid) continue;
    for (int j = 0; j < Widths<Dh>::n_tiles; ++j) {
      const index_t at =
          (x.first + slot_row(slot)) * Dh + j * mma::kCols + mma::c_element(lane_id(), 2 * slot).col;
      a.dq[at] += a.scale * x.dq[j][2 * slot];
      a.dq[at + 1] += a.scale * x.dq[j][2 * slot + 1];
    }
  }
}

template <int Dh>
__device__ void add_key_block(const BackwardArgs& a, index_t sample, const bf16* ks, const bf16* vs,
                              index_t first_key, bool partly, QueryGradientRows<Dh>& x) {
  const std::uint32_t hidden = partly ? hidden_keys(a, sample, first_key) : 0u;
  Word operand[kTileK][mma::kARegisters];  // P, then dS (the fp32 P is not held beside dP)
  {
    float s[kTileN][mma::kCValues] = {};
    accumulate_product<Dh, kTileN>(x.q, ks, Widths<Dh>::rows_ld, s);  // S = Q K^T
    if (partly) hide_scores<kTileN>(hidden, s);
#pragma unroll
    for (int j = 0; j < kTileN; ++j)
#pragma unroll
      for (int e = 0; e < mma::kCValues; ++e) s[j][e] = exp2_flushed(fmaf(s[j][e], a.scale_log2, -x.lse2[e / 2]));
    as_a_fragments<kTileN>(s, operand);
  }
  float ds[kTileN][mma::kCValues] = {};
  accumulate_product<Dh, kTileN>(x.dout, vs, Widths<Dh>::rows_ld, ds);  // dP = dO V^T
#pragma unroll
  for (int j = 0; j < kTileN; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e)
      ds[j][e] = packed_value<kTileN>(operand, j, e) * (ds[j][e] - x.delta[e / 2]);
  as_a_fragments<kTileN>(ds, operand);
  accumulate_product_kmajor<kTile, Widths<Dh>::n_tiles>(operand, ks, Widths<Dh>::rows_ld, x.dq);  // dQ += dS K
}

template <int Dh>
__global__ void __launch_bounds__(kThreads) query_gradients_kernel(const BackwardArgs a) {
  QueryGradientRows<Dh> x;
  for_each_visible_key_block<Dh>(a, load_query_gradient_rows<Dh>(a, x),
                                 [&](index_t sample, index_t first_key, bool partly, const bf16* ks, const bf16* vs) {
                                   add_key_block<Dh>(a, sample, ks, vs, first_key, partly, x);
                                 });
  store_query_gradients<Dh>(a, x);
}

template <int Dh>
void launch_backward(const BackwardArgs& a, index_t batch) {
  constexpr int key_bytes = key_gradients_shared_bytes<Dh>(), query_bytes = key_block_buffers_bytes<Dh>();
  static const bool allowed = (allow_shared_memory(key_gradients_kernel<Dh>, key_bytes),
                               allow_shared_memory(query_gradients_kernel<Dh>, query_bytes), true);
  (void)allowed;
  const auto stream = ExecSpace().cuda_stream();
  key_gradients_kernel<Dh><<<team_grid(a.nk, batch * a.kv_heads), kThreads, key_bytes, stream>>>(a);
  check_launch("key gradients");
  query_gradients_kernel<Dh><<<team_grid(a.nq, batch * a.heads), kThreads, query_bytes, stream>>>(a);
  check_launch("query gradients");
}

}  // namespace

void tensor_core_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                     const View4<const bf16>& v, const View4<const bf16>& dout,
                                     const View3<const float>& lse, const View3<const float>& delta,
                                     const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                                     const View4<bf16>& dv) {
  const index_t dh = q.extent(3);
  require_rows_aligned(q, "q");
  require_rows_aligned(k, "k");
  require_rows_aligned(v, "v");
  require_rows_aligned(dout, "dout");
  require_rows_aligned(dq, "dq");
  require_rows_aligned(dk, "dk");
  require_rows_aligned(dv, "dv");
  require_contiguous(lse, "lse");
  require_contiguous(delta, "delta");
  require_contiguous(scope.q_pos, "the query positions");
  require_contiguous(scope.k_pos, "the key positions");
  const float scale = 1.0f / compat::sqrt(static_cast<float>(dh));
  const BackwardArgs a{q.data(), k.data(), v.data(), dout.data(), lse.data(), delta.data(), scope.q_pos.data(),
                       scope.k_pos.data(), scope.mask, dq.data(), dk.data(), dv.data(), index_t(q.extent(1)),
                       index_t(k.extent(1)), index_t(q.extent(2)), index_t(k.extent(2)), scale, scale * kLog2e};
  if (dh == 64) return launch_backward<64>(a, q.extent(0));
  if (dh == 128) return launch_backward<128>(a, q.extent(0));
  throw RuntimeFailure("attention (tensor_core): " + tensor_core_unavailable_reason(dh));
}

#else  // a build without CUDA: the deck check refuses the kernel before a run starts

void tensor_core_backward_accumulate(const View4<const bf16>&, const View4<const bf16>&, const View4<const bf16>&,
                                     const View4<const bf16>&, const View3<const float>&, const View3<const float>&,
                                     const AttentionScope&, const View4<float>&, const View4<bf16>&,
                                     const View4<bf16>&) {
  throw RuntimeFailure("attention: " + tensor_core_unavailable_reason(0));
}

#endif

}  // namespace miniattn::kernels
