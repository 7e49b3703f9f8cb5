#pragma once
// Moves between the token-major layout of the dense layers, [B*n, D] with head h
// in columns h*Dh..(h+1)*Dh-1, and the head-major layout of attention,
// [B, H, n, Dh], which keeps every (sample, head) block contiguous for the
// attention tiles and for ring / all-to-all exchanges.
#include "core/types.hpp"

namespace miniattn::kernels {

// qkv [B*n, (H + 2 KV) Dh] (q | k | v) -> q [B, H, n, Dh], k, v [B, KV, n, Dh]
// (KV = H, or fewer K/V heads shared by groups of query heads: GQA / MQA)
template <class T>
void split_qkv_heads(const View2<const T>& qkv, const View4<T>& q, const View4<T>& k, const View4<T>& v);

// dq [B, H, n, Dh], dk, dv [B, KV, n, Dh] -> dqkv [B*n, (H + 2 KV) Dh] (overwritten)
template <class T>
void merge_qkv_heads(const View4<const T>& dq, const View4<const T>& dk, const View4<const T>& dv,
                     const View2<T>& dqkv);

// x [B*n, D] -> xh [B, H, n, Dh]
template <class T>
void split_heads(const View2<const T>& x, const View4<T>& xh);

// xh [B, H, n, Dh] -> x [B*n, D] (overwritten)
template <class T>
void merge_heads(const View4<const T>& xh, const View2<T>& x);

}  // namespace miniattn::kernels
