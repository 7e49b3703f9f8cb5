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

// Bytes the element-wise kernels move (read + written), in scalars per row of
// width D (or F for the FFN's hidden rows): one convention for the
// performance model and for calibrate's measurement of their bandwidth.
namespace elementwise_scalars {
constexpr double layer_norm_forward = 3, layer_norm_backward = 5;  // x, y, stats; x, dy, dx, ...
constexpr double qkv_split = 6, qkv_merge = 6;                     // [R, 3D] <-> three [H, R, Dh]
constexpr double head_merge = 2, head_split = 2;                   // [H, R, Dh] <-> [R, D]
constexpr double residual_copy = 2, residual_add = 3;
constexpr double gelu_forward = 2, gelu_backward = 3;              // per row of F
// What calibrate runs for one block: the forward's LayerNorms, q/k/v split,
// head merge, residual copies and adds, GELU; the backward's GELU,
// LayerNorms, head split and q/k/v merge (in rows of D, and rows of F).
constexpr double calibrated_block_d = 2 * layer_norm_forward + qkv_split + head_merge + 2 * residual_copy +
                                      2 * residual_add + 2 * layer_norm_backward + head_split + qkv_merge;
constexpr double calibrated_block_f = gelu_forward + gelu_backward;
}  // namespace elementwise_scalars

}  // namespace miniattn
