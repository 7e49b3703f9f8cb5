#pragma once
// Floating-point operations of one training step of the whole model (all
// ranks together), counted from the model's shapes: a multiply-add is 2 FLOPs.
//  dense (per layer, per token): 2 (D*(D + 2 KV Dh) + D*D + 2*D*F) (KV = D/Dh
//  without GQA: D*3D); head: 2*D*V per token;
//  attention forward per layer: 4 * B * N^2 * D (Q K^T and P V), half if causal;
//  backward: 2x the dense forward, 2.5x the attention forward.
#include "core/config.hpp"

namespace miniattn {

struct FlopCount {
  double forward = 0.0;
  double backward = 0.0;
  double total() const { return forward + backward; }
};

FlopCount training_step_flops(const ModelConfig& model);

// The attention part alone (all layers), same conventions.
struct AttentionFlops {
  double forward = 0.0;
  double backward = 0.0;
};
AttentionFlops attention_flops(const ModelConfig& model);

}  // namespace miniattn
