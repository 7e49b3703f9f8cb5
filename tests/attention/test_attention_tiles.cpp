// The attention tile choice (kernels/attention.hpp): per backend, inside level-0
// team scratch where level 1 is global memory, refused with the keys' names
// when requested tiles cannot fit. The GPU rule is exercised here with a
// GPU-like limit, since the rule, not the device, is under test.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "kernels/attention.hpp"

namespace {

using miniattn::KernelConfig;
using miniattn::kernels::AttentionTiles;
using miniattn::kernels::choose_attention_tiles;
using miniattn::kernels::TeamScratchLimits;

// A Hopper-like level 0: 48 KiB of shared memory per block less what Kokkos keeps.
const TeamScratchLimits kGpuLike{48 * 1024 - 8216, true};
const TeamScratchLimits kHostLike{32 * 1024, false};

std::size_t largest_pass(const AttentionTiles& t) {
  return std::max(t.forward_scratch_bytes, t.backward_scratch_bytes);
}

TEST(AttentionTiles, HostDefaultsAreTheMeasuredTileAndMayUseLevelOne) {
  const AttentionTiles t = choose_attention_tiles<float>(KernelConfig{}, 64, kHostLike);
  EXPECT_EQ(t.blocking.query_block, miniattn::kernels::kHostTileRows);
  EXPECT_EQ(t.blocking.key_block, miniattn::kernels::kHostTileRows);
  EXPECT_EQ(t.scratch_level, largest_pass(t) <= kHostLike.level0_bytes ? 0 : 1);
}

TEST(AttentionTiles, GpuDefaultsAreTheLargestTileInLevelZero) {
  for (const long dh : {32L, 64L}) {  // host register tiles pad more than a GPU's; 128 fits no host-padded tile
    const AttentionTiles t = choose_attention_tiles<float>(KernelConfig{}, dh, kGpuLike);
    EXPECT_EQ(t.scratch_level, 0);
    EXPECT_LE(largest_pass(t), kGpuLike.level0_bytes) << "dh " << dh;
    // No candidate tile of larger area fits: asking for it is refused.
    const long area = t.blocking.query_block * t.blocking.key_block;
    for (const long qb : miniattn::kernels::kTileSides)
      for (const long kb : miniattn::kernels::kTileSides) {
        if (qb * kb <= area) continue;
        KernelConfig bigger;
        bigger.query_block = qb;
        bigger.key_block = kb;
        EXPECT_THROW(choose_attention_tiles<float>(bigger, dh, kGpuLike), miniattn::InputError)
            << "dh " << dh << ": " << qb << " x " << kb << " fits but " << area << " was chosen";
      }
  }
}

TEST(AttentionTiles, GpuKeepsARequestedSideAndChoosesTheOther) {
  KernelConfig requested;
  requested.query_block = 16;
  const AttentionTiles t = choose_attention_tiles<double>(requested, 64, kGpuLike);
  EXPECT_EQ(t.blocking.query_block, 16);
  EXPECT_GE(t.blocking.key_block, 16);
  EXPECT_LE(largest_pass(t), kGpuLike.level0_bytes);
}

TEST(AttentionTiles, GpuRefusesTilesBeyondLevelZeroNamingTheKeys) {
  KernelConfig requested;
  requested.query_block = requested.key_block = 256;
  try {
    choose_attention_tiles<float>(requested, 64, kGpuLike);
    FAIL() << "256 x 256 tiles cannot fit 40 KiB";
  } catch (const miniattn::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernels.query_block, kernels.key_block"), std::string::npos) << e.what();
  }
}

TEST(AttentionTiles, ScratchGrowsWithTheTiles) {
  KernelConfig small, large;
  small.query_block = small.key_block = 16;
  large.query_block = large.key_block = 64;
  const AttentionTiles a = choose_attention_tiles<float>(small, 64, kHostLike);
  const AttentionTiles b = choose_attention_tiles<float>(large, 64, kHostLike);
  EXPECT_LT(a.forward_scratch_bytes, b.forward_scratch_bytes);
  EXPECT_LT(a.backward_scratch_bytes, b.backward_scratch_bytes);
  // float64 tiles take about twice the bytes of float32 ones.
  const AttentionTiles d = choose_attention_tiles<double>(large, 64, kHostLike);
  EXPECT_GT(d.forward_scratch_bytes, b.forward_scratch_bytes * 3 / 2);
}

}  // namespace
