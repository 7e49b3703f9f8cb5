#include "comm/exchange_label.hpp"

#include <stdexcept>

namespace miniattn {

const char* to_string(Exchange label) {
  switch (label) {
    case Exchange::loss: return "loss";
    case Exchange::grad_norm: return "grad_norm";
    case Exchange::gradients_replicated: return "gradients.replicated";
    case Exchange::gradients_tensor_parallel: return "gradients.tensor_parallel";
    case Exchange::gradients_wpe: return "gradients.wpe";
    case Exchange::gradients_tied_embedding: return "gradients.tied_embedding";
    case Exchange::pipeline_activations: return "pipeline.activations";
    case Exchange::pipeline_gradients: return "pipeline.gradients";
    case Exchange::tensor_parallel_gather: return "tensor_parallel.gather";
    case Exchange::tensor_parallel_allreduce: return "tensor_parallel.allreduce";
    case Exchange::tensor_parallel_reduce_scatter: return "tensor_parallel.reduce_scatter";
    case Exchange::ring_forward_kv: return "ring.forward.kv";
    case Exchange::ring_backward_kv: return "ring.backward.kv";
    case Exchange::ring_backward_dkdv: return "ring.backward.dkdv";
    case Exchange::rsa_forward_k: return "rsa.forward.k";
    case Exchange::rsa_forward_v: return "rsa.forward.v";
    case Exchange::rsa_backward_kv: return "rsa.backward.kv";
    case Exchange::rsa_backward_dkdv: return "rsa.backward.dkdv";
    case Exchange::allgather_forward_kv: return "allgather.forward.kv";
    case Exchange::allgather_backward_kv: return "allgather.backward.kv";
    case Exchange::allgather_backward_dkdv: return "allgather.backward.dkdv";
    case Exchange::ulysses_forward_qkv: return "ulysses.forward.qkv";
    case Exchange::ulysses_forward_out: return "ulysses.forward.out";
    case Exchange::ulysses_forward_lse: return "ulysses.forward.lse";
    case Exchange::ulysses_backward_dout: return "ulysses.backward.dout";
    case Exchange::ulysses_backward_dqkv: return "ulysses.backward.dqkv";
    case Exchange::overlap_probe: return "overlap";
  }
  throw std::logic_error("to_string(Exchange): unknown label");
}

}  // namespace miniattn
