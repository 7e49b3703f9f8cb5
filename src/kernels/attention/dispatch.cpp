// The one dispatch of the attention kernels (kernels.attention: fused, gemm,
// cudnn; the contract is attention.hpp's): the accumulate functions check
// their arguments and hand the work to the kernel that blocking.kernel names
// (fused/, gemm/, cudnn/), and the kernel-independent steps around them live
// here: init, finalize, whole local attention, the backward's delta and the
// rounding of an Acc<T> accumulator to T.
#include <string>
#include <type_traits>

#include "core/kokkos_compat.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "kernels/attention/fused/fused_attention.hpp"
#include "kernels/attention/gemm/chunked_attention.hpp"
#include "kernels/attention/kernel_record.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/base/simd_pack.hpp"
#include "kernels/base/team_policy.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

// What both passes require of a key block: k and v [B, KV, n_k, Dh] with q's
// B and Dh and KV dividing q's H, and a position for every query and key row.
template <class T>
void require_key_block(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                       const AttentionScope& scope) {
  const index_t batch = q.extent(0), heads = q.extent(1), dh = q.extent(3);
  const index_t kv_heads = k.extent(1), nk = k.extent(2);
  require((kv_heads == 0 ? heads == 0 : heads % kv_heads == 0) && same_extents4(k, batch, kv_heads, nk, dh),
          "k must be [B, KV, n_k, Dh] with q's B, Dh and KV dividing q's H");
  require(same_extents4(v, batch, kv_heads, nk, dh), "v must have k's shape");
  require(static_cast<index_t>(scope.q_pos.extent(0)) == static_cast<index_t>(q.extent(2)) &&
              static_cast<index_t>(scope.k_pos.extent(0)) == nk,
          "q_pos / k_pos must have one entry per query / key row");
}

// The kernel's record (kernel_record.cpp) says which precisions it computes;
// the branches of the dispatch compile only those, so this check comes first.
template <class T>
void require_computes(AttentionKernel kernel) {
  const std::string refusal = attention_kernel_precision_refusal(kernel, precision_of<T>());
  require(refusal.empty(), refusal.c_str());
}

}  // namespace

template <class A>
void attention_forward_init(const View4<A>& out_acc, const View3<A>& row_max, const View3<A>& row_sum) {
  Kokkos::deep_copy(out_acc, A(0));
  Kokkos::deep_copy(row_max, -compat::infinity<A>());
  Kokkos::deep_copy(row_sum, A(0));
}

template <class T>
void attention_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                  const AttentionScope& scope, const View4<Acc<T>>& out_acc,
                                  const View3<Acc<T>>& row_max, const View3<Acc<T>>& row_sum,
                                  const AttentionWorkspace<T>& workspace) {
  const AttentionBlocking& blocking = scope.blocking;
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t nk = k.extent(2);
  require_key_block<T>(q, k, v, scope);
  require(same_extents4(out_acc, batch, heads, nq, dh), "out_acc must have q's shape");
  require(same_extents3(row_max, batch, heads, nq) && same_extents3(row_sum, batch, heads, nq),
          "row_max and row_sum must be [B, H, n_q]");
  if (batch == 0 || heads == 0 || nq == 0 || nk == 0 || dh == 0) return;
  require_computes<T>(blocking.kernel);
  constexpr bool narrow_values = !std::is_same<T, Acc<T>>::value;  // bf16
  switch (blocking.kernel) {
    case AttentionKernel::gemm: return chunked_forward_accumulate<T>(q, k, v, scope, out_acc, row_max, row_sum, workspace);
    case AttentionKernel::fused:
      if constexpr (!narrow_values) {
        fused_forward_accumulate<T>(q, k, v, scope, out_acc, row_max, row_sum);
      } else {
        require(kHostExecution, "the fused kernel computes bf16 on host backends only");
        fused_bf16_forward_accumulate(q, k, v, scope, out_acc, row_max, row_sum, workspace);
      }
      return;
    case AttentionKernel::cudnn:
      if constexpr (narrow_values) cudnn_forward_accumulate(q, k, v, scope, out_acc, row_max, row_sum, workspace);
      return;
    case AttentionKernel::automatic: break;
  }
  require(false, "kernels.attention auto must be resolved (choose_attention_tiles) before a kernel runs");
}

template <class T>
void attention_forward_finalize(const View4<const Acc<T>>& out_acc, const View3<const Acc<T>>& row_max,
                                const View3<const Acc<T>>& row_sum, const View3<Acc<T>>& lse, const View4<T>& out) {
  using A = Acc<T>;
  const index_t batch = out.extent(0), heads = out.extent(1), n = out.extent(2), dh = out.extent(3);
  require(same_extents4(out_acc, batch, heads, n, dh), "out_acc must have out's shape");
  require(same_extents3(row_max, batch, heads, n) && same_extents3(row_sum, batch, heads, n) &&
              same_extents3(lse, batch, heads, n),
          "row_max, row_sum and lse must be [B, H, n] with out's B, H, n");
  const A neg_inf = -compat::infinity<A>();
  const index_t rows = batch * heads * n;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  // A row a GPU thread, its Dh values over the thread's vector lanes: a warp
  // reads whole rows (one thread looping over its row read 32 rows apart).
  Kokkos::parallel_for(
      "miniattn::attention_forward_finalize", row_team_policy(rows, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t row = team_row(team);
        if (row >= rows) return;
        const index_t i = row % n;
        const index_t bh = row / n;
        const index_t b = bh / heads, h = bh % heads;
        const A m = row_max(b, h, i);  // read before lse is written: lse may alias row_max
        const A l = row_sum(b, h, i);
        const bool seen = !(m == neg_inf || !(l > A(0)));
        const A inv = seen ? A(1) / l : A(0);  // a row that saw no key: 0
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                             [&](index_t d) { out(b, h, i, d) = narrow<T>(out_acc(b, h, i, d) * inv); });
        Kokkos::single(Kokkos::PerThread(team), [&]() { lse(b, h, i) = seen ? m + compat::log(l) : neg_inf; });
      });
}

template <class T>
void attention_forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                       const AttentionScope& scope, const View4<T>& out, const View3<Acc<T>>& lse,
                       const View3<Acc<T>>& row_sum, const AttentionWorkspace<T>& workspace) {
  const View4<Acc<T>> out_acc = accumulator_of(out, workspace);
  attention_forward_init<Acc<T>>(out_acc, lse, row_sum);
  attention_forward_accumulate<T>(q, k, v, scope, out_acc, lse, row_sum, workspace);
  attention_forward_finalize<T>(out_acc, lse, row_sum, lse, out);
}

#define MINIATTN_INSTANTIATE_ATTENTION_FORWARD(T)                                                                     \
  template void attention_forward_accumulate<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,  \
                                                const AttentionScope&, const View4<Acc<T>>&,                          \
                                                const View3<Acc<T>>&, const View3<Acc<T>>&,                           \
                                                const AttentionWorkspace<T>&);                                        \
  template void attention_forward_finalize<T>(const View4<const Acc<T>>&, const View3<const Acc<T>>&,                \
                                              const View3<const Acc<T>>&, const View3<Acc<T>>&, const View4<T>&);     \
  template void attention_forward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,             \
                                     const AttentionScope&, const View4<T>&, const View3<Acc<T>>&,                    \
                                     const View3<Acc<T>>&, const AttentionWorkspace<T>&);
MINIATTN_INSTANTIATE_ATTENTION_FORWARD(float)
MINIATTN_INSTANTIATE_ATTENTION_FORWARD(double)
MINIATTN_INSTANTIATE_ATTENTION_FORWARD(bf16)
#undef MINIATTN_INSTANTIATE_ATTENTION_FORWARD
template void attention_forward_init<float>(const View4<float>&, const View3<float>&, const View3<float>&);
template void attention_forward_init<double>(const View4<double>&, const View3<double>&, const View3<double>&);

template <class T>
void attention_backward_delta(const View4<const T>& out, const View4<const T>& dout, const View3<Acc<T>>& delta) {
  using A = Acc<T>;
  const index_t batch = out.extent(0), heads = out.extent(1), n = out.extent(2), dh = out.extent(3);
  require(same_extents4(dout, batch, heads, n, dh), "dout must have out's shape");
  require(same_extents3(delta, batch, heads, n), "delta must be [B, H, n]");
  const index_t rows = batch * heads * n;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  using V = typename simd::Pack<A>::type;
  // As the finalize: a row a GPU thread, summed over its vector lanes in a
  // fixed order (team_vector_sum; SIMD packs on the host).
  Kokkos::parallel_for(
      "miniattn::attention_backward_delta", row_team_policy(rows, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t row = team_row(team);
        if (row >= rows) return;
        const index_t i = row % n;
        const index_t bh = row / n;
        const index_t b = bh / heads, h = bh % heads;
        const T* const o_row = &out(b, h, i, 0);
        const T* const g_row = &dout(b, h, i, 0);
        const A sum = team_vector_sum<A>(
            team, dh, [&](index_t c0, int w) { return V(simd::load_n(o_row + c0, w) * simd::load_n(g_row + c0, w)); });
        Kokkos::single(Kokkos::PerThread(team), [&]() { delta(b, h, i) = sum; });
      });
}

template <class T>
void attention_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                   const View4<const T>& out, const View4<const T>& dout,
                                   const View3<const Acc<T>>& lse,
                                   const View3<const Acc<T>>& delta, const AttentionScope& scope,
                                   const View4<Acc<T>>& dq, const View4<T>& dk, const View4<T>& dv,
                                   const AttentionWorkspace<T>& workspace) {
  const AttentionBlocking& blocking = scope.blocking;
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t kv_heads = k.extent(1), nk = k.extent(2);
  require_key_block<T>(q, k, v, scope);
  require(same_extents4(out, batch, heads, nq, dh) && same_extents4(dout, batch, heads, nq, dh) &&
              same_extents4(dq, batch, heads, nq, dh),
          "out, dout and dq must have q's shape");
  require(same_extents4(dk, batch, kv_heads, nk, dh) && same_extents4(dv, batch, kv_heads, nk, dh),
          "dk and dv must have k's shape");
  require(same_extents3(lse, batch, heads, nq) && same_extents3(delta, batch, heads, nq),
          "lse and delta must be [B, H, n_q]");
  if (batch == 0 || heads == 0 || nq == 0 || nk == 0 || dh == 0) return;
  require_computes<T>(blocking.kernel);
  constexpr bool narrow_values = !std::is_same<T, Acc<T>>::value;  // bf16
  switch (blocking.kernel) {
    case AttentionKernel::gemm:
      return chunked_backward_accumulate<T>(q, k, v, dout, lse, delta, scope, dq, dk, dv, workspace);
    case AttentionKernel::fused:
      if constexpr (!narrow_values) {
        fused_backward_accumulate<T>(q, k, v, dout, lse, delta, scope, dq, dk, dv, workspace);
      } else {
        require(kHostExecution, "the fused kernel computes bf16 on host backends only");
        fused_bf16_backward_accumulate(q, k, v, dout, lse, delta, scope, dq, dk, dv, workspace);
      }
      return;
    case AttentionKernel::cudnn:
      if constexpr (narrow_values)
        cudnn_backward_accumulate(q, k, v, out, dout, lse, delta, scope, dq, dk, dv, workspace);
      return;
    case AttentionKernel::automatic: break;
  }
  require(false, "kernels.attention auto must be resolved (choose_attention_tiles) before a kernel runs");
}

template <class T>
void round_accumulator(const View4<const Acc<T>>& dq_acc, const View4<T>& dq) {
  if (static_cast<const void*>(dq_acc.data()) == static_cast<const void*>(dq.data())) return;
  require(dq_acc.span() == dq.span(), "dq_acc must have dq's shape");
  const Acc<T>* const from = dq_acc.data();
  T* const to = dq.data();
  Kokkos::parallel_for(
      "miniattn::round_accumulator", RowPolicy(0, static_cast<index_t>(dq.span())),
      KOKKOS_LAMBDA(const index_t e) { to[e] = narrow<T>(from[e]); });
}

// Through row_packs, as the element-wise kernels (kernels/layers/elementwise.cpp):
// whole SIMD registers and a division per row, where a division per value for
// its row and column showed in the fused bf16 kernel's backward profile.
template <class T>
void add_rounded_rows(const View4<const Acc<T>>& acc, index_t first, index_t rows, const View4<T>& x) {
  const index_t dh = x.extent(3), acc_rows = acc.extent(2), x_rows = x.extent(2);
  require(acc.extent(0) == x.extent(0) && acc.extent(1) == x.extent(1) && acc.extent(3) == x.extent(3) &&
              rows <= acc_rows && first + rows <= x_rows,
          "add_rounded_rows: acc must be [B, KV, >= rows, Dh] and x hold rows first .. first + rows - 1");
  const Acc<T>* const a = acc.data();
  T* const to = x.data();
  using V = typename simd::Pack<Acc<T>>::type;
  simd::row_packs<Acc<T>>("miniattn::attention_add_key_gradients", index_t(x.extent(0) * x.extent(1)) * rows, dh,
                          KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                            const index_t head = r / rows, j = r - head * rows;
                            T* const target = to + (head * x_rows + first + j) * dh + c0;
                            const Acc<T>* const sum = a + (head * acc_rows + j) * dh + c0;
                            simd::store_n(target, V(simd::load_n(target, width) + simd::pack_load_n<V>(sum, width)),
                                          width);
                          });
}

#define MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(T)                                                                     \
  template void attention_backward_delta<T>(const View4<const T>&, const View4<const T>&, const View3<Acc<T>>&);       \
  template void attention_backward_accumulate<T>(                                                                      \
      const View4<const T>&, const View4<const T>&, const View4<const T>&, const View4<const T>&,                      \
      const View4<const T>&, const View3<const Acc<T>>&, const View3<const Acc<T>>&, const AttentionScope&,            \
      const View4<Acc<T>>&, const View4<T>&, const View4<T>&,                                                          \
      const AttentionWorkspace<T>&);                                                                                   \
  template void round_accumulator<T>(const View4<const Acc<T>>&, const View4<T>&);                                   \
  template void add_rounded_rows<T>(const View4<const Acc<T>>&, index_t, index_t, const View4<T>&);
MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(float)
MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(double)
MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(bf16)
#undef MINIATTN_INSTANTIATE_ATTENTION_BACKWARD

}  // namespace miniattn::kernels
