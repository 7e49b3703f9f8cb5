// The GPU row reductions' lane walk (kernels/base/reduction.hpp, gpu_lane_walk),
// emulated on the host for every lane of both widths a build may have (an
// NVIDIA warp, 32; an AMD wavefront, 64): every column of a row is visited once,
// a lane's terms are used in column order, and each group's terms are all asked
// for before the first is used (what keeps kGpuLoadsInFlight loads in flight).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernel_test_util.hpp"

namespace miniattn::ktest {
namespace {

using kernels::gpu_lane_walk;
using kernels::kGpuLoadsInFlight;

template <int Lanes>
void expect_every_column_once_in_order() {
  SCOPED_TRACE(std::to_string(Lanes) + " lanes");
  for (const index_t count : {0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130, 200, 2048, 2049}) {
    std::vector<int> visits(static_cast<std::size_t>(count), 0);
    for (index_t lane = 0; lane < Lanes; ++lane) {
      std::vector<index_t> asked, used;
      const std::size_t group = kGpuLoadsInFlight;
      const std::size_t columns =
          lane < count ? static_cast<std::size_t>((count - lane + Lanes - 1) / Lanes) : 0;
      const std::size_t in_full_groups = columns / group * group;
      gpu_lane_walk<double, Lanes>(
          lane, count,
          [&](const index_t c, int width) {
            EXPECT_EQ(width, 1);
            asked.push_back(c);
            ++visits[static_cast<std::size_t>(c)];
            return double(c);
          },
          [&](const double term) {
            used.push_back(static_cast<index_t>(term));
            // A full group's terms are all asked for before its first is used.
            const std::size_t k = used.size() - 1;
            if (k < in_full_groups) {
              EXPECT_GE(asked.size(), (k / group + 1) * group) << "lane " << lane;
            }
          });
      EXPECT_EQ(used, asked) << "lane " << lane;
      for (std::size_t k = 0; k < used.size(); ++k) {
        EXPECT_EQ(used[k] % Lanes, lane);
        if (k > 0) {
          EXPECT_EQ(used[k], used[k - 1] + Lanes);
        }
      }
    }
    for (index_t c = 0; c < count; ++c)
      ASSERT_EQ(visits[static_cast<std::size_t>(c)], 1) << "column " << c << " of " << count;
  }
}

TEST(GpuLaneWalk, EveryColumnOnceInOrderGroupsAskedFirst) {
  expect_every_column_once_in_order<kernels::kNvidiaWarpLanes>();
  expect_every_column_once_in_order<kernels::kAmdWavefrontLanes>();
  EXPECT_TRUE(kernels::kGpuRowLanes == kernels::kNvidiaWarpLanes || kernels::kGpuRowLanes == kernels::kAmdWavefrontLanes);
}

}  // namespace
}  // namespace miniattn::ktest
