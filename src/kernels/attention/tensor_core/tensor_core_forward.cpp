// The tensor-core kernel's forward pass (tensor_core_attention.hpp): a team
// per 64 query rows of one (sample, head). Each warp loads its 16 rows' Q
// fragments and running state once, folds in every key block its rows may
// see (S = Q K^T, online softmax in registers, O += P V with P never leaving
// its lanes), and stores the state back once.
#include "kernels/attention/tensor_core/tensor_core_attention.hpp"

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/attention/tensor_core/tensor_core_warp.hpp"

namespace miniattn::kernels {

#if defined(KOKKOS_ENABLE_CUDA)
namespace {

using namespace tensor_core;

struct ForwardArgs {
  const bf16 *q, *k, *v;
  const index_t *q_pos, *k_pos;
  AttentionMask mask;
  float *out_acc, *row_max, *row_sum;
  index_t heads, kv_heads, nq, nk;
  float scale_log2;  // 1/sqrt(Dh) log2(e): scores in log2 units, for exp2
};

// A warp's 16 query rows: Q's fragments, the running output (C tiles), and
// the maximum (log2 units) and sum of the lane's two rows.
template <int Dh>
struct QueryRows {
  Word q[Widths<Dh>::k_steps][mma::kARegisters];
  float o[Widths<Dh>::n_tiles][mma::kCValues];
  float m[kRowSlots], l[kRowSlots];
  index_t first;  // row of [B H nq] of the warp's first row
  index_t valid;  // rows of the 16 that exist
};

template <int Dh>
__device__ Range load_query_rows(const ForwardArgs& a, QueryRows<Dh>& x) {
  const index_t first_query = warp_first_row();
  x.valid = rows_left(a.nq, first_query);
  x.first = blockIdx.y * a.nq + first_query;
  load_a_fragments<Dh>(a.q + x.first * Dh, x.valid, x.q);
  const float neg_inf = -compat::infinity<float>();
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const int row = slot_row(slot);
    const bool exists = row < x.valid;
    const index_t r = x.first + row;
    x.m[slot] = exists ? a.row_max[r] * kLog2e : neg_inf;
    x.l[slot] = exists ? a.row_sum[r] : 0.0f;
    for (int j = 0; j < Widths<Dh>::n_tiles; ++j) {
      const index_t at = r * Dh + j * mma::kCols + mma::c_element(lane_id(), 2 * slot).col;
      x.o[j][2 * slot] = exists ? a.out_acc[at] : 0.0f;
      x.o[j][2 * slot + 1] = exists ? a.out_acc[at + 1] : 0.0f;
    }
  }
  return warp_rows_range(a.q_pos, a.nq);
}

template <int Dh>
__device__ void store_query_rows(const ForwardArgs& a, const QueryRows<Dh>& x) {
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const int row = slot_row(slot);
    if (row >= x.valid) continue;
    const index_t r = x.first + row;
    for (int j = 0; j < Widths<Dh>::n_tiles; ++j) {
      const index_t at = r * Dh + j * mma::kCols + mma::c_element(lane_id(), 2 * slot).col;
      *reinterpret_cast<float2*>(a.out_acc + at) = make_float2(x.o[j][2 * slot], x.o[j][2 * slot + 1]);
    }
    if (lane_id() % 4 == 0) {
      a.row_max[r] = x.m[slot] / kLog2e;
      a.row_sum[r] = x.l[slot];
    }
  }
}

// One staged key block into a warp's rows. Hidden keys (the mask, rows past
// n_k) score -inf; a row that has seen no key keeps m = -inf and subtracts 0.
// The maximum is taken over the unscaled scores (scaling by a positive factor
// keeps the order), so that scale and shift are one fma before the
// exponential: the largest score's probability is 1 to the fma's rounding. The row sum adds the
// probabilities rounded to bf16, as P V multiplies them.
template <int Dh>
__device__ void fold_key_block(const ForwardArgs& a, index_t sample, const bf16* ks, const bf16* vs,
                               index_t first_key, bool partly, QueryRows<Dh>& x) {
  const float neg_inf = -compat::infinity<float>();
  const std::uint32_t hidden = partly ? hidden_keys(a, sample, first_key) : 0u;
  float s[kTileN][mma::kCValues] = {};
  accumulate_product<Dh, kTileN>(x.q, ks, Widths<Dh>::rows_ld, s);
  if (partly) hide_scores<kTileN>(hidden, s);
  float block_max[kRowSlots] = {neg_inf, neg_inf};
#pragma unroll
  for (int j = 0; j < kTileN; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e) block_max[e / 2] = fmaxf(block_max[e / 2], s[j][e]);
  float base[kRowSlots], alpha[kRowSlots], sum[kRowSlots] = {0.0f, 0.0f};
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const float m_new = fmaxf(x.m[slot], quad_max(block_max[slot]) * a.scale_log2);
    base[slot] = m_new == neg_inf ? 0.0f : m_new;
    alpha[slot] = exp2_flushed(x.m[slot] - base[slot]);
    x.m[slot] = m_new;
  }
#pragma unroll
  for (int j = 0; j < kTileN; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e) s[j][e] = exp2_flushed(fmaf(s[j][e], a.scale_log2, -base[e / 2]));
  Word p[kTileK][mma::kARegisters];
  as_a_fragments<kTileN>(s, p);
  add_row_sums<kTileN>(p, sum);
  for (int slot = 0; slot < kRowSlots; ++slot) x.l[slot] = x.l[slot] * alpha[slot] + quad_sum(sum[slot]);
  // Once a row's maximum has settled, alpha is 1: the warp skips multiplying
  // its output by it when that holds in every lane (the same bits either way).
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
#pragma unroll
    for (int j = 0; j < Widths<Dh>::n_tiles; ++j)
#pragma unroll
      for (int e = 0; e < mma::kCValues; ++e) x.o[j][e] *= alpha[e / 2];
  accumulate_product_kmajor<kTile, Widths<Dh>::n_tiles>(p, vs, Widths<Dh>::rows_ld, x.o);
}

template <int Dh>
__global__ void __launch_bounds__(kThreads) forward_kernel(const ForwardArgs a) {
  QueryRows<Dh> x;
  for_each_visible_key_block<Dh>(a, load_query_rows<Dh>(a, x),
                                 [&](index_t sample, index_t first_key, bool partly, const bf16* ks, const bf16* vs) {
                                   fold_key_block<Dh>(a, sample, ks, vs, first_key, partly, x);
                                 });
  store_query_rows<Dh>(a, x);
}

template <int Dh>
void launch_forward(const ForwardArgs& a, index_t batch) {
  constexpr int bytes = key_block_buffers_bytes<Dh>();
  static const bool allowed = (allow_shared_memory(forward_kernel<Dh>, bytes), true);
  (void)allowed;
  forward_kernel<Dh><<<team_grid(a.nq, batch * a.heads), kThreads, bytes, ExecSpace().cuda_stream()>>>(a);
  check_launch("forward");
}

}  // namespace

std::string tensor_core_unavailable_reason(index_t head_dim) {
  if (head_dim != 64 && head_dim != 128)
    return "the tensor_core kernel is compiled for heads of 64 and 128 values; these have " +
           std::to_string(head_dim) + " (d_model / heads)";
  int device = 0;
  cudaDeviceProp properties{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&properties, device) != cudaSuccess)
    return "the tensor_core kernel could not query the CUDA device";
  if (properties.major < 8)
    return "the tensor_core kernel needs compute capability 8.0 or later (bf16 mma.sync); this device has " +
           std::to_string(properties.major) + "." + std::to_string(properties.minor);
  return "";
}

void tensor_core_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                    const View4<const bf16>& v, const AttentionScope& scope,
                                    const View4<float>& out_acc, const View3<float>& row_max,
                                    const View3<float>& row_sum) {
  const index_t dh = q.extent(3);
  require_rows_aligned(q, "q");
  require_rows_aligned(k, "k");
  require_rows_aligned(v, "v");
  require_rows_aligned(out_acc, "out_acc");
  require_contiguous(row_max, "row_max");
  require_contiguous(row_sum, "row_sum");
  require_contiguous(scope.q_pos, "the query positions");
  require_contiguous(scope.k_pos, "the key positions");
  const float scale = 1.0f / compat::sqrt(static_cast<float>(dh));
  const ForwardArgs a{q.data(), k.data(), v.data(), scope.q_pos.data(), scope.k_pos.data(), scope.mask,
                      out_acc.data(), row_max.data(), row_sum.data(), index_t(q.extent(1)), index_t(k.extent(1)),
                      index_t(q.extent(2)), index_t(k.extent(2)), scale * kLog2e};
  if (dh == 64) return launch_forward<64>(a, q.extent(0));
  if (dh == 128) return launch_forward<128>(a, q.extent(0));
  throw RuntimeFailure("attention (tensor_core): " + tensor_core_unavailable_reason(dh));
}

#else  // a build without CUDA: the deck check refuses the kernel before a run starts

std::string tensor_core_unavailable_reason(index_t) {
  return std::string("the tensor_core kernel needs a CUDA build of miniattn; this one runs on ") + ExecSpace::name();
}

void tensor_core_forward_accumulate(const View4<const bf16>&, const View4<const bf16>&, const View4<const bf16>&,
                                    const AttentionScope&, const View4<float>&, const View3<float>&,
                                    const View3<float>&) {
  throw RuntimeFailure("attention: " + tensor_core_unavailable_reason(0));
}

#endif

}  // namespace miniattn::kernels
