// bf16 (src/core/bf16.hpp): round to nearest even from fp32, against an
// independent reference that picks the nearer of the two bf16 neighbours in
// double arithmetic; exact round trips; special values; the same bits when
// converted in a Kokkos kernel (on a GPU: the device's code path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"

namespace {

using miniattn::bf16;

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

double value_of_bf16_bits(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The nearer of the bf16 values just below and just above |x| (towards zero
// and away from it), ties to the even mantissa; past the largest bf16 the
// overflow threshold of IEEE rounding decides between it and infinity.
std::uint16_t reference_round(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t down = static_cast<std::uint16_t>(u >> 16), up = static_cast<std::uint16_t>(down + 1);
  if ((u & 0xffffu) == 0) return down;
  const double v = x, lo = value_of_bf16_bits(down);
  // `up` of the largest finite bf16 is infinity: round as if the next binade existed.
  const double hi = std::isinf(value_of_bf16_bits(up)) ? std::ldexp(1.0, 128) * (x < 0 ? -1 : 1)
                                                       : value_of_bf16_bits(up);
  const double d_lo = std::fabs(v - lo), d_hi = std::fabs(hi - v);
  if (d_lo < d_hi) return down;
  if (d_hi < d_lo) return up;
  return (down & 1u) == 0 ? down : up;
}

TEST(Bf16, RoundsToNearestEvenLikeAnIndependentReference) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t u = any_bits(gen);
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties, often
    float x;
    std::memcpy(&x, &u, sizeof x);
    if (std::isnan(x)) continue;
    // Subnormal inputs: miniattn and its tests run with DAZ on
    // (core/denormals.hpp), under which the reference's double arithmetic
    // reads them as 0; bf16's rounding is integer bit logic, the same in
    // every binade, so the normal ones cover it.
    if ((u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0) continue;
    ASSERT_EQ(bf16(x).bits, reference_round(x)) << std::hexfloat << x;
  }
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-2.0f).bits, 0xc000);
  EXPECT_EQ(bf16(1.0f + 0x1p-8f).bits, 0x3f80);         // tie, even below
  EXPECT_EQ(bf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);     // tie, even above
  EXPECT_EQ(bf16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);  // above the tie
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // past the largest bf16: infinity
  EXPECT_EQ(bf16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  const bf16 nan(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(static_cast<float>(nan)));
  const bf16 negative_nan(-std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(static_cast<float>(negative_nan)));
  EXPECT_EQ(negative_nan.bits & 0x8000, 0x8000);
  float signalling;
  const std::uint32_t s = 0x7f800001u;  // a payload only in the low bits: truncation would make it infinity
  std::memcpy(&signalling, &s, sizeof s);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(signalling))));
}

TEST(Bf16, EveryValueRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const bf16 x = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16(f).bits, b);
  }
}

// values rounded to bf16 in a Kokkos kernel (on a GPU: the device's code path).
// A free function: CUDA forbids device lambdas in a test body.
std::vector<std::uint16_t> rounded_in_a_kernel(std::vector<float> values) {
  const int n = static_cast<int>(values.size());
  Kokkos::View<float*, miniattn::HostSpace> host_in(values.data(), n);
  const auto in = Kokkos::create_mirror_view_and_copy(miniattn::MemSpace(), host_in);
  Kokkos::View<std::uint16_t*, miniattn::MemSpace> out("bits", n);
  Kokkos::parallel_for(
      Kokkos::RangePolicy<miniattn::ExecSpace>(0, n), KOKKOS_LAMBDA(const int i) { out(i) = bf16(in(i)).bits; });
  const auto host_out = Kokkos::create_mirror_view_and_copy(miniattn::HostSpace(), out);
  return std::vector<std::uint16_t>(host_out.data(), host_out.data() + n);
}

TEST(Bf16, SameBitsInAKernel) {
  std::vector<float> values(1 << 16);
  std::mt19937 gen(11);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (auto& v : values) v = dist(gen);
  // Against the test's own rounding, not the host's bf16(): on a host
  // backend the kernel runs that very function.
  const std::vector<std::uint16_t> bits = rounded_in_a_kernel(values);
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(bits[i], reference_round(values[i])) << values[i];
}

}  // namespace
