// The attention tile choice (kernels/attention/attention.hpp): per backend, inside level-0
// team scratch where level 1 is global memory, refused with the keys' names
// when requested tiles cannot fit. The GPU rule is exercised here with a
// GPU-like limit, since the rule, not the device, is under test.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/tensor_core/tensor_core_attention.hpp"

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
        bigger.attention = miniattn::AttentionKernel::fused;
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
  requested.attention = miniattn::AttentionKernel::fused;
  requested.query_block = requested.key_block = 256;
  try {
    choose_attention_tiles<float>(requested, 64, kGpuLike);
    FAIL() << "256 x 256 tiles cannot fit 40 KiB";
  } catch (const miniattn::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernels.query_block, kernels.key_block"), std::string::npos) << e.what();
  }
  // The gemm kernel has no tiles in team scratch: the same request is no error there.
  requested.attention = miniattn::AttentionKernel::gemm;
  EXPECT_EQ(choose_attention_tiles<float>(requested, 64, kGpuLike).blocking.kernel, miniattn::AttentionKernel::gemm);
}

// auto: the fused kernel on host backends, chunked GEMMs on GPUs, with each
// backend's chunk unless one is given; a given kernel is kept.
TEST(AttentionTiles, AutoPicksTheKernelPerBackend) {
  using miniattn::AttentionKernel;
  using namespace miniattn::kernels;
  const AttentionTiles host = choose_attention_tiles<float>(KernelConfig{}, 64, kHostLike);
  EXPECT_EQ(host.blocking.kernel, AttentionKernel::fused);
  EXPECT_EQ(host.blocking.chunk, kHostChunk);
  const AttentionTiles gpu = choose_attention_tiles<float>(KernelConfig{}, 64, kGpuLike);
  EXPECT_EQ(gpu.blocking.kernel, AttentionKernel::gemm);
  EXPECT_EQ(gpu.blocking.chunk, kDeviceChunk);
  KernelConfig given;
  given.attention = AttentionKernel::gemm;
  given.chunk = 300;
  const AttentionTiles h = choose_attention_tiles<double>(given, 64, kHostLike);
  EXPECT_EQ(h.blocking.kernel, AttentionKernel::gemm);
  EXPECT_EQ(h.blocking.chunk, 300);
  given.attention = AttentionKernel::fused;
  EXPECT_EQ(choose_attention_tiles<double>(given, 64, kGpuLike).blocking.kernel, AttentionKernel::fused);
}

// tensor_core: bf16 only, and only where the build and device have it (a
// host build names what it runs on); auto never picks it.
TEST(AttentionTiles, TensorCoreOnlyWhereItCanRun) {
  using miniattn::AttentionKernel;
  using namespace miniattn::kernels;
  KernelConfig given;
  given.attention = AttentionKernel::tensor_core;
  try {
    choose_attention_tiles<float>(given, 64, kGpuLike);
    ADD_FAILURE() << "fp32 accepted";
  } catch (const miniattn::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 only"), std::string::npos) << e.what();
  }
  const std::string reason = tensor_core_unavailable_reason(64);
  if (miniattn::kHostExecution) {
    EXPECT_NE(reason.find("needs a CUDA build"), std::string::npos) << reason;
  }
  if (reason.empty()) {
    EXPECT_EQ(choose_attention_tiles<miniattn::bf16>(given, 64, kGpuLike).blocking.query_tile(), kTensorCoreTile);
    EXPECT_NE(tensor_core_unavailable_reason(96).find("64 and 128"), std::string::npos);
  } else {
    EXPECT_THROW(choose_attention_tiles<miniattn::bf16>(given, 64, kGpuLike), miniattn::InputError);
  }
  EXPECT_EQ(choose_attention_tiles<miniattn::bf16>(KernelConfig{}, 64, kGpuLike).blocking.kernel, AttentionKernel::gemm);
}

// The memory plan's figure is what the workspace allocates, for each kernel,
// with chunks larger and smaller than the blocks.
TEST(AttentionTiles, WorkspaceAllocatesWhatThePlanSays) {
  using namespace miniattn::kernels;
  for (const auto kernel : {miniattn::AttentionKernel::fused, miniattn::AttentionKernel::gemm})
    for (const long chunk : {7L, 64L, 1000L}) {
      const AttentionShape shape{2, 6, 3, 16, 100, 37};
      AttentionBlocking blocking{96, 96, kernel, chunk};
      const AttentionWorkspace<float> workspace(shape, blocking);
      EXPECT_EQ(workspace.bytes(), attention_workspace_bytes(shape, blocking, sizeof(float), sizeof(float)))
          << miniattn::to_string(kernel) << " chunk " << chunk;
      EXPECT_GT(workspace.bytes(), 0u);
      const AttentionWorkspace<miniattn::bf16> narrow(shape, blocking);
      EXPECT_EQ(narrow.bytes(), attention_workspace_bytes(shape, blocking, sizeof(miniattn::bf16), sizeof(float)))
          << miniattn::to_string(kernel) << " chunk " << chunk << ", bf16";
    }
  // gemm: one chunk pair's scores and gradients for every head.
  const AttentionWorkspace<double> gemm({2, 6, 3, 16, 100, 37}, {0, 0, miniattn::AttentionKernel::gemm, 64});
  EXPECT_EQ(gemm.bytes(), 2u * 2 * 6 * 64 * 37 * sizeof(double));
  // bf16: the scores in fp32 and the probabilities in bf16, for pairs of half
  // as many keys (32 of the 64), besides the fp32 accumulators of the output
  // (then dq) and of a key chunk's dk and dv.
  const AttentionWorkspace<miniattn::bf16> mixed({2, 6, 3, 16, 100, 37}, {0, 0, miniattn::AttentionKernel::gemm, 64});
  EXPECT_EQ(mixed.bytes(), 2u * 6 * 64 * 32 * (2 + 4) + (2u * 6 * 100 * 16 + 2 * 2 * 3 * 32 * 16) * 4);
  // A chunk longer than both sides is cut to the longer one before its keys
  // are halved, as the kernel cuts it: pairs of 100 queries by 50 keys.
  const AttentionWorkspace<miniattn::bf16> whole({2, 6, 3, 16, 100, 100},
                                                 {0, 0, miniattn::AttentionKernel::gemm, 1000});
  EXPECT_EQ(whole.bytes(), 2u * 6 * 100 * 50 * (2 + 4) + (2u * 6 * 100 * 16 + 2 * 2 * 3 * 50 * 16) * 4);
  // cudnn: a call's output (then dq) and LSE, its dk and dv, a block's fp32
  // dk and dv sums, beside the fp32 output accumulator; the plan adds its
  // estimate of cuDNN's own workspace (an fp32 dq and two statistics a row),
  // and with the gemm fallback (packed documents) the gemm kernel's scratch.
  const AttentionShape shape{2, 6, 3, 16, 100, 37};
  const std::size_t cudnn_estimate = 2u * 6 * 100 * (16 + 2) * 4;
  for (const bool fallback : {false, true}) {
    AttentionBlocking cudnn{0, 0, miniattn::AttentionKernel::cudnn, 64};
    cudnn.gemm_fallback = fallback;
    const AttentionWorkspace<miniattn::bf16> w(shape, cudnn);
    const std::size_t own = 2u * 6 * 100 * 16 * (2 + 4) + 2u * 6 * 100 * 4 + 2u * 2 * 3 * 37 * 16 * (2 + 4);
    const std::size_t gemm_scratch = 2u * 6 * 64 * 32 * (2 + 4) + 2u * 2 * 3 * 32 * 16 * 4;  // keys: 64 / 2
    EXPECT_EQ(w.bytes(), own + (fallback ? gemm_scratch : 0)) << "gemm fallback " << fallback;
    EXPECT_EQ(attention_workspace_bytes(shape, cudnn, 2, 4), w.bytes() + cudnn_estimate);
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
