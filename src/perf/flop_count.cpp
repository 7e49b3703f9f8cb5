#include "perf/flop_count.hpp"

namespace miniattn {

FlopCount training_step_flops(const ModelConfig& m) {
  const double D = static_cast<double>(m.d_model), F = static_cast<double>(m.ffn_width());
  const double V = static_cast<double>(m.vocab), N = static_cast<double>(m.seq_len);
  const double B = static_cast<double>(m.batch), L = static_cast<double>(m.layers);
  const double tokens = B * N;
  const double dense = tokens * (L * 2.0 * (D * 3.0 * D + D * D + 2.0 * D * F) + 2.0 * D * V);
  const double attention = L * 4.0 * B * N * N * D * (m.causal ? 0.5 : 1.0);
  FlopCount c;
  c.forward = dense + attention;
  c.backward = 2.0 * dense + 2.5 * attention;
  return c;
}

}  // namespace miniattn
