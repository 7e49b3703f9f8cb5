#pragma once
// The vector lanes of a GPU thread (Kokkos's vector_length): a whole warp on
// NVIDIA GPUs (32 lanes), a whole wavefront on AMD's CDNA GPUs (64: MI250X,
// MI300). The row kernels (reduction.hpp: one thread of these lanes per row)
// and the fused kernel's teams (team_policy.hpp) use this width, and a row
// reduction's order is fixed by it: a CUDA and a HIP build sum in different
// orders (their results agree to rounding), each the same on every run.
// Host builds never use it on a device; their tests walk both widths
// (tests/kernels/test_row_lanes.cpp).
#include <Kokkos_Core.hpp>

namespace miniattn::kernels {

#if defined(KOKKOS_ENABLE_HIP)
constexpr int kGpuRowLanes = 64;
#else
constexpr int kGpuRowLanes = 32;
#endif
// The widths a build may have, for the host emulation tests.
constexpr int kNvidiaWarpLanes = 32, kAmdWavefrontLanes = 64;

}  // namespace miniattn::kernels
