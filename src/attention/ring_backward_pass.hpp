#pragma once
// The backward ring shared by `ring` and `rsa`: K and V travel as in the
// forward pass, and the dK, dV accumulators of block b start on rank b at zero,
// visit `steps` ranks (each adds its queries' contribution) and then go home:
// after `size` hops round the whole ring, or straight from rank b + steps - 1
// when a sliding window stops the ring early. The next K/V transfer and the
// accumulators' hop are posted before the waits, so transfers run while the
// next block computes.
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

// The labels the pass counts its shifts under: K/V, and the dK/dV accumulators.
struct RingBackwardLabels {
  Exchange kv, dkdv;
};

// accumulate(source, k_block, v_block, dk_block, dv_block) adds this rank's
// queries' contribution for the K/V block that started on rank `source`.
// On return dk, dv hold the gradients of this rank's own keys and values.
template <class T, class Accumulate>
void ring_backward_pass(Comm& comm, MPI_Comm ring, int rank, int size, int steps, const View4<const T>& k,
                        const View4<const T>& v, const View4<T>& dk, const View4<T>& dv,
                        const RingBackwardBuffers<T>& buffers, RingBackwardLabels labels, const Accumulate& accumulate) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  // The last hop: home to the block's owner, steps - 1 ranks back.
  const int home = (rank - (steps - 1) + size) % size, away = (rank + steps - 1) % size;
  const bool travels = steps > 1;
  View4<const T> k_current = k, v_current = v;
  View4<T> dk_current = travels ? buffers.dk[1] : dk, dv_current = travels ? buffers.dv[1] : dv;
  Kokkos::deep_copy(dk_current, T(0.0f));
  Kokkos::deep_copy(dv_current, T(0.0f));
  for (int step = 0; step < steps; ++step) {
    const int slot = step % 2;
    PendingExchange kv_pending, grad_pending;
    if (step + 1 < steps) {
      comm.post_shift(k_current.data(), buffers.k[slot].data(), k_current.span(), next, prev, ring, labels.kv,
                      kv_pending);
      comm.post_shift(v_current.data(), buffers.v[slot].data(), v_current.span(), next, prev, ring, labels.kv,
                      kv_pending);
    }
    accumulate((rank - step + size) % size, k_current, v_current, dk_current, dv_current);
    if (travels) {  // the accumulators move on (on the last step: home to their block's owner)
      const bool last = step + 1 == steps;
      const View4<T>& dk_next = last ? dk : buffers.dk[slot];
      const View4<T>& dv_next = last ? dv : buffers.dv[slot];
      const int dest = last ? home : next, source = last ? away : prev;
      comm.post_shift(dk_current.data(), dk_next.data(), dk_current.span(), dest, source, ring, labels.dkdv,
                      grad_pending);
      comm.post_shift(dv_current.data(), dv_next.data(), dv_current.span(), dest, source, ring, labels.dkdv,
                      grad_pending);
      dk_current = dk_next;
      dv_current = dv_next;
    }
    comm.wait(kv_pending);
    comm.wait(grad_pending);
    if (step + 1 < steps) {
      k_current = buffers.k[slot];
      v_current = buffers.v[slot];
    }
  }
}

}  // namespace miniattn
