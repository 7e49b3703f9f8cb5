#pragma once
// The backward ring shared by `ring` and `rsa`: K and V travel as in the
// forward pass, and the dK, dV accumulators of block b start on rank b at zero,
// visit every rank (each adds its queries' contribution) and come home after
// `size` hops. The next K/V transfer and the accumulators' hop are posted
// before the waits, so transfers run while the next block computes.
#include <mpi.h>

#include <string>

#include "comm/comm.hpp"
#include "core/types.hpp"

namespace miniattn {

// Double buffers for what travels; all four are unused (may be empty) when size == 1.
template <class T>
struct RingBackwardBuffers {
  const View4<T>* k;   // [2]
  const View4<T>* v;   // [2]
  const View4<T>* dk;  // [2]
  const View4<T>* dv;  // [2]
};

// accumulate(source, k_block, v_block, dk_block, dv_block) adds this rank's
// queries' contribution for the K/V block that started on rank `source`.
// On return dk, dv hold the gradients of this rank's own keys and values.
template <class T, class Accumulate>
void ring_backward_pass(Comm& comm, MPI_Comm ring, int rank, int size, const View4<const T>& k,
                        const View4<const T>& v, const View4<T>& dk, const View4<T>& dv,
                        const RingBackwardBuffers<T>& buffers, const std::string& label, const Accumulate& accumulate) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  View4<const T> k_current = k, v_current = v;
  View4<T> dk_current = size > 1 ? buffers.dk[1] : dk, dv_current = size > 1 ? buffers.dv[1] : dv;
  Kokkos::deep_copy(dk_current, T(0));
  Kokkos::deep_copy(dv_current, T(0));
  for (int step = 0; step < size; ++step) {
    const int slot = step % 2;
    PendingExchange kv_pending, grad_pending;
    if (step + 1 < size) {
      comm.post_shift(k_current.data(), buffers.k[slot].data(), k_current.span(), next, prev, ring, label + ".kv",
                      kv_pending);
      comm.post_shift(v_current.data(), buffers.v[slot].data(), v_current.span(), next, prev, ring, label + ".kv",
                      kv_pending);
    }
    accumulate((rank - step + size) % size, k_current, v_current, dk_current, dv_current);
    if (size > 1) {  // the accumulators move on (on the last step: home to their block's owner)
      const View4<T>& dk_next = step + 1 < size ? buffers.dk[slot] : dk;
      const View4<T>& dv_next = step + 1 < size ? buffers.dv[slot] : dv;
      comm.post_shift(dk_current.data(), dk_next.data(), dk_current.span(), next, prev, ring, label + ".dkdv",
                      grad_pending);
      comm.post_shift(dv_current.data(), dv_next.data(), dv_current.span(), next, prev, ring, label + ".dkdv",
                      grad_pending);
      dk_current = dk_next;
      dv_current = dv_next;
    }
    comm.wait(kv_pending);
    comm.wait(grad_pending);
    if (step + 1 < size) {
      k_current = buffers.k[slot];
      v_current = buffers.v[slot];
    }
  }
}

}  // namespace miniattn
