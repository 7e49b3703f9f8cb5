#include "perf/flop_count.hpp"

namespace miniattn {

AttentionFlops attention_flops(const ModelConfig& m) {
  const double D = static_cast<double>(m.d_model), N = static_cast<double>(m.seq_len);
  const double B = static_cast<double>(m.batch), L = static_cast<double>(m.layers);
  AttentionFlops a;
  a.forward = L * 4.0 * B * N * N * D * (m.causal ? 0.5 : 1.0);
  a.backward = 2.5 * a.forward;
  return a;
}

FlopCount training_step_flops(const ModelConfig& m) {
  const double D = static_cast<double>(m.d_model), F = static_cast<double>(m.ffn_width());
  const double V = static_cast<double>(m.vocab), N = static_cast<double>(m.seq_len);
  const double B = static_cast<double>(m.batch), L = static_cast<double>(m.layers);
  const double tokens = B * N;
  const double QKV = static_cast<double>(m.qkv_rows());
  const double dense = tokens * (L * 2.0 * (D * QKV + D * D + 2.0 * D * F) + 2.0 * D * V);
  const AttentionFlops attention = attention_flops(m);
  FlopCount c;
  c.forward = dense + attention.forward;
  c.backward = 2.0 * dense + attention.backward;
  return c;
}

}  // namespace miniattn
