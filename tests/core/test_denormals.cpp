// Subnormal results flushed to zero on every host thread (core/denormals.hpp):
// test_main calls flush_denormals_to_zero() before Kokkos starts, as
// miniattn's main does, so each thread of the host execution space must
// inherit it. 1e-30 * 1e-10 = 1e-40 is subnormal in fp32 (smallest normal
// 1.2e-38): 0 when flushed. The results are read as bits: with DAZ on, this
// thread would read a subnormal as 0 in any float comparison.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/denormals.hpp"

namespace miniattn {
namespace {

TEST(Denormals, FlushedOnEveryHostThread) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const int count = 64 * Host().concurrency();
  Kokkos::View<float*, Host::memory_space> small("small", count), products("products", count);
  Kokkos::deep_copy(small, 1e-10f);
  const float tiny = 1e-30f;
  Kokkos::parallel_for(
      "test_denormals", Kokkos::RangePolicy<Host, Kokkos::Schedule<Kokkos::Static>>(0, count),
      [=](const int i) { products(i) = tiny * small(i); });  // host threads only: no device lambda
  Kokkos::fence();
  int kept = 0;
  for (int i = 0; i < count; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &products(i), sizeof bits);
    kept += bits != 0;
  }
  EXPECT_EQ(kept, 0) << "of " << count << " products 1e-40 on " << Host().concurrency()
                     << " threads: subnormal results kept";
  // Normal results are untouched.
  EXPECT_EQ(std::numeric_limits<float>::min() * 1.0f, std::numeric_limits<float>::min());
  EXPECT_TRUE(flush_denormals_to_zero()) << "no flush control on this host";
}

}  // namespace
}  // namespace miniattn
