#pragma once
// Analytic bytes one rank hands to MPI per training step (payload sent to
// other ranks), by strategy. With P = sp ranks, U = Ulysses degree, G = P / U
// ring ranks, b = local batch, n = N / P local positions, s = sizeof(scalar),
// X = b n D s the bytes of one local [b, H, n, Dh] tensor, per layer:
//   ring (G = P):    forward 2 (G-1) X;           backward 2 (G-1) X + 2 G X  (G > 1)
//   rsa:             forward 2 (P-1) X;           backward 2 (P-1) X + 2 P X  (P > 1)
//   ulysses/hybrid:  forward (4 X + b H n s)(U-1)/U + ring over G ranks;
//                    backward 4 X (U-1)/U + ring over G ranks
// plus, per step: the replicated gradients (all ranks > 1), the wpe rows
// (dp > 1), the loss (ranks > 1) and the wpe share of the gradient norm (sp > 1).
#include <cstdint>
#include <map>
#include <string>

#include "core/config.hpp"

namespace miniattn {

struct ExchangeModelInput {
  ModelConfig model;
  Strategy strategy = Strategy::local;
  int world_size = 1, dp = 1, sp = 1, ulysses = 1;
  std::size_t scalar_bytes = 8;
  std::int64_t replicated_parameters = 0;
  std::int64_t local_wpe_parameters = 0;
};

// Bytes per step, by the same labels the Comm counters use.
std::map<std::string, double> modelled_exchange_bytes(const ExchangeModelInput& in);

}  // namespace miniattn
