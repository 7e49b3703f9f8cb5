#pragma once
// Counter-based random numbers: a value is a pure function of its key
// (stream, a, b, c), so any rank computes any token or initial weight without
// communication, and a run on 1 or 64 ranks sees the same numbers.
// The mixer is SplitMix64's finaliser applied along the key.
#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/kokkos_compat.hpp"

namespace miniattn::rng {

KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

KOKKOS_INLINE_FUNCTION std::uint64_t hash(std::uint64_t stream, std::uint64_t a, std::uint64_t b = 0,
                                          std::uint64_t c = 0) {
  return mix64(mix64(mix64(mix64(stream) ^ a) ^ b) ^ c);
}

// Uniform in (0, 1]: never 0, so log() below is finite.
KOKKOS_INLINE_FUNCTION double uniform_open0(std::uint64_t h) {
  return static_cast<double>((h >> 11) + 1) * (1.0 / 9007199254740992.0);
}

// Standard normal for key (stream, a, b, c) by Box-Muller on two hashed uniforms.
KOKKOS_INLINE_FUNCTION double normal(std::uint64_t stream, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::uint64_t h = hash(stream, a, b, c);
  const double u1 = uniform_open0(h);
  const double u2 = uniform_open0(mix64(h ^ 0x5bd1e9955bd1e995ULL));
  return compat::sqrt(-2.0 * compat::log(u1)) * compat::cos(2.0 * compat::pi<double>() * u2);
}

// Uniform integer in [0, n) for key (stream, a, b, c).
KOKKOS_INLINE_FUNCTION std::int64_t uniform_int(std::int64_t n, std::uint64_t stream, std::uint64_t a,
                                                std::uint64_t b, std::uint64_t c) {
  return static_cast<std::int64_t>(hash(stream, a, b, c) % static_cast<std::uint64_t>(n));
}

// Distinct streams so that data and initial weights never share keys.
constexpr std::uint64_t kStreamData = 0x64617461ULL;     // "data"
constexpr std::uint64_t kStreamInit = 0x696e6974ULL;     // "init"
constexpr std::uint64_t kStreamDocuments = 0x646f6373ULL;  // "docs"

}  // namespace miniattn::rng
