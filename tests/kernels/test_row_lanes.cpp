// The GPU row reductions' lane walk (kernels/base/reduction.hpp, gpu_lane_walk),
// emulated on the host for every lane of both widths a build may have (an
// NVIDIA warp, 32; an AMD wavefront, 64): every column of a row is visited once,
// a lane's terms are used in column order, and each group's terms are all asked
// for before the first is used (what keeps kGpuLoadsInFlight loads in flight).
// And the device's map of row_packs (simd::RowSweep), walked thread by thread.
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

// Every (row, column) once; thread t keeps column t % cols, so consecutive
// threads touch consecutive columns of one row (coalesced); the threads never
// exceed the device's once it holds a whole row, nor the elements.
TEST(RowSweep, EveryElementOnceConsecutiveThreadsOnConsecutiveColumns) {
  for (const index_t rows : {1, 2, 7, 64, 1000}) {
    for (const index_t cols : {1, 3, 64, 256, 1000}) {
      for (const index_t device_threads : {1, 100, 256, 4096, 270336}) {
        SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols) + ", " + std::to_string(device_threads) +
                     " device threads");
        const kernels::simd::RowSweep sweep = kernels::simd::row_sweep(rows, cols, device_threads);
        EXPECT_LE(sweep.threads(), std::max(device_threads, cols));
        EXPECT_LE(sweep.threads(), rows * cols);
        std::vector<int> visits(static_cast<std::size_t>(rows * cols), 0);
        for (index_t t = 0; t < sweep.threads(); ++t) {
          index_t last_row = -1;
          sweep.visit(t, [&](const index_t r, const index_t c) {
            ASSERT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols);
            EXPECT_EQ(c, t % cols);
            EXPECT_GT(r, last_row);
            last_row = r;
            ++visits[static_cast<std::size_t>(r * cols + c)];
          });
        }
        for (std::size_t e = 0; e < visits.size(); ++e) ASSERT_EQ(visits[e], 1) << "element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace miniattn::ktest
