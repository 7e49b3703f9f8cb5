// The attention tile choice (kernels/attention/attention.hpp): per backend, inside level-0
// team scratch where level 1 is global memory, refused with the keys' names
// when requested tiles cannot fit. The GPU rule is exercised here with a
// GPU-like limit, since the rule, not the device, is under test.
#include <gtest/gtest.h>

#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/error.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "kernels/attention/kernel_record.hpp"

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
  // The fused kernel's bf16 version: its own measured tiles, in buffers of each thread.
  KernelConfig fused;
  fused.attention = miniattn::AttentionKernel::fused;
  const AttentionTiles narrow = choose_attention_tiles<miniattn::bf16>(fused, 64, kHostLike);
  EXPECT_EQ(narrow.blocking.query_block, miniattn::kernels::kHostBf16QueryRows);
  EXPECT_EQ(narrow.blocking.key_block, miniattn::kernels::kHostBf16KeyRows);
  EXPECT_EQ(largest_pass(narrow), 0u);
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

// The memory plan's figure is what the workspace allocates, for each kernel,
// with chunks larger and smaller than the blocks.
// kernels.cudnn_documents: only a cudnn run with packed documents has a
// choice; gemm keeps the fallback's scratch, calls needs none.
TEST(AttentionTiles, PackedDocumentsGoWhereTheDeckSays) {
  using miniattn::AttentionKernel;
  using miniattn::CudnnDocuments;
  using miniattn::to_string;
  namespace kernels = miniattn::kernels;
  for (const AttentionKernel kernel : {AttentionKernel::fused, AttentionKernel::gemm, AttentionKernel::cudnn})
    for (const bool documents : {false, true})
      for (const CudnnDocuments how : {CudnnDocuments::gemm, CudnnDocuments::calls}) {
        kernels::AttentionBlocking blocking;
        blocking.kernel = kernel;
        kernels::route_documents(blocking, documents, how);
        const bool cudnn_documents = kernel == AttentionKernel::cudnn && documents;
        EXPECT_EQ(blocking.gemm_fallback, cudnn_documents && how == CudnnDocuments::gemm) << to_string(kernel);
        EXPECT_EQ(blocking.cudnn_document_calls, cudnn_documents && how == CudnnDocuments::calls) << to_string(kernel);
        EXPECT_EQ(blocking.runs_gemm(), kernel == AttentionKernel::gemm || blocking.gemm_fallback);
      }
}

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
  // dk and dv sums, beside the fp32 output accumulator, and cuDNN's own
  // workspace, allocated from the plan's estimate: the deterministic
  // backward's bf16 dS of every query-key pair (both rounded up to 64), an
  // fp32 a query row and 256 bytes; with calls cut to 64 query rows, 64 rows'
  // worth; the non-deterministic backward's fp32 dQ instead of dS. With the
  // gemm fallback (packed documents), the gemm kernel's scratch too.
  const AttentionShape shape{2, 6, 3, 16, 100, 37};
  const std::size_t deterministic = 2u * 6 * 128 * 64 * 2 + 2u * 6 * 100 * 4 + 256;
  const std::size_t cut_to_64 = 2u * 6 * 64 * 64 * 2 + 2u * 6 * 64 * 4 + 256;
  const std::size_t atomic = 2u * 6 * 100 * 16 * 4 + 2u * 6 * 100 * 4 + 256;
  for (const bool fallback : {false, true})
    for (const auto& [algorithm, rows_per_call, cudnn_workspace] :
         {std::tuple{true, 0, deterministic}, std::tuple{true, 64, cut_to_64}, std::tuple{false, 64, atomic}}) {
      AttentionBlocking cudnn{0, 0, miniattn::AttentionKernel::cudnn, 64};
      cudnn.gemm_fallback = fallback;
      cudnn.deterministic = algorithm;
      cudnn.cudnn_rows_per_call = rows_per_call;
      const AttentionWorkspace<miniattn::bf16> w(shape, cudnn);
      const std::size_t own = 2u * 6 * 100 * 16 * (2 + 4) + 2u * 6 * 100 * 4 + 2u * 2 * 3 * 37 * 16 * (2 + 4);
      const std::size_t gemm_scratch = 2u * 6 * 64 * 32 * (2 + 4) + 2u * 2 * 3 * 32 * 16 * 4;  // keys: 64 / 2
      SCOPED_TRACE(std::string("gemm fallback ") + (fallback ? "on" : "off") + ", deterministic " +
                   (algorithm ? "on" : "off") + ", rows per call " + std::to_string(rows_per_call));
      EXPECT_EQ(cudnn_workspace_bytes(shape, cudnn), cudnn_workspace);
      EXPECT_EQ(w.bytes(), own + (fallback ? gemm_scratch : 0) + cudnn_workspace);
      EXPECT_EQ(attention_workspace_bytes(shape, cudnn, 2, 4), w.bytes());
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

// The kernel records (kernels/attention/kernel_record.cpp): every deck word
// but auto has one, auto takes the first that computes the precision where
// it runs, and a kernel asked for a precision it lacks is refused by the deck
// check and by the dispatch alike, naming the kernels that compute it.
TEST(KernelRecord, EveryKernelWordButAutoHasOne) {
  using miniattn::AttentionKernel;
  namespace k = miniattn::kernels;
  const std::size_t words = miniattn::enum_names<AttentionKernel>().size();
  EXPECT_EQ(std::size(k::attention_kernel_records()), words - 1);
  for (std::size_t i = 0; i < words; ++i) {
    const auto kernel = static_cast<AttentionKernel>(i);
    if (kernel == AttentionKernel::automatic) continue;
    EXPECT_EQ(k::attention_kernel_record(kernel).kernel, kernel) << miniattn::to_string(kernel);
  }
  EXPECT_THROW(k::attention_kernel_record(AttentionKernel::automatic), std::logic_error);
}

TEST(KernelRecord, AutoTakesFusedOnCpusCudnnForBf16OnCudaAndGemmElsewhere) {
  using miniattn::AttentionKernel;
  using miniattn::Precision;
  namespace k = miniattn::kernels;
  EXPECT_EQ(k::auto_attention_kernel(Precision::fp32, k::Backend::host), AttentionKernel::fused);
  EXPECT_EQ(k::auto_attention_kernel(Precision::fp64, k::Backend::host), AttentionKernel::fused);
  // bf16 on CPUs: fused where the core has bf16 dot products (auto's
  // `usable`: attention_blocking.cpp), else gemm.
  EXPECT_EQ(k::auto_attention_kernel(Precision::bf16, k::Backend::host), AttentionKernel::fused);
  const auto without_bf16_dot = [](AttentionKernel kernel) { return kernel != AttentionKernel::fused; };
  EXPECT_EQ(k::auto_attention_kernel(Precision::bf16, k::Backend::host, without_bf16_dot), AttentionKernel::gemm);
  for (const k::Backend gpu : {k::Backend::cuda, k::Backend::hip})
    for (const Precision p : {Precision::fp32, Precision::fp64})
      EXPECT_EQ(k::auto_attention_kernel(p, gpu), AttentionKernel::gemm) << k::to_string(gpu);
  EXPECT_EQ(k::auto_attention_kernel(Precision::bf16, k::Backend::hip), AttentionKernel::gemm);
  EXPECT_EQ(k::auto_attention_kernel(Precision::bf16, k::Backend::cuda), AttentionKernel::cudnn);
  // Where cuDNN does not load (on some rank), the next record's kernel.
  const auto without_cudnn = [](AttentionKernel kernel) { return kernel != AttentionKernel::cudnn; };
  EXPECT_EQ(k::auto_attention_kernel(Precision::bf16, k::Backend::cuda, without_cudnn), AttentionKernel::gemm);
  for (const k::AttentionKernelRecord& r : k::attention_kernel_records())
    EXPECT_TRUE(r.auto_backends == 0 || (r.auto_backends & ~r.backends) == 0) << "auto may take "
        << miniattn::to_string(r.kernel) << " where it does not run";
}

TEST(KernelRecord, RefusalsNameTheKernelsThatComputeThePrecision) {
  using miniattn::AttentionKernel;
  using miniattn::Precision;
  namespace k = miniattn::kernels;
  EXPECT_EQ(k::attention_kernel_precision_refusal(AttentionKernel::cudnn, Precision::fp32),
            "the cudnn kernel computes bf16 only; for model.precision fp32 use fused, gemm or auto");
  EXPECT_EQ(k::attention_kernel_precision_refusal(AttentionKernel::cudnn, Precision::fp64),
            "the cudnn kernel computes bf16 only; for model.precision fp64 use fused, gemm or auto");
  for (const Precision p : {Precision::fp32, Precision::fp64, Precision::bf16}) {
    EXPECT_EQ(k::attention_kernel_precision_refusal(AttentionKernel::gemm, p), "");
    EXPECT_EQ(k::attention_kernel_precision_refusal(AttentionKernel::automatic, p), "");
  }
}

// The dispatch's branches compile only what a kernel computes, so without the
// record's check a bf16 call of the fused kernel would return having done nothing.
template <class T>
void expect_dispatch_refuses(miniattn::AttentionKernel kernel) {
  namespace k = miniattn::kernels;
  using A = miniattn::Acc<T>;
  miniattn::View4<T> q("q", 1, 1, 2, 8);
  miniattn::View4<A> out_acc("out_acc", 1, 1, 2, 8);
  miniattn::View3<A> row_max("row_max", 1, 1, 2), row_sum("row_sum", 1, 1, 2);
  miniattn::View1<miniattn::index_t> positions("positions", 2);
  k::AttentionScope scope{positions, positions, k::AttentionMask{}, k::AttentionBlocking{}};
  scope.blocking.kernel = kernel;
  const std::string refusal = k::attention_kernel_precision_refusal(kernel, k::precision_of<T>());
  try {
    k::attention_forward_accumulate<T>(q, q, q, scope, out_acc, row_max, row_sum, k::AttentionWorkspace<T>{});
    ADD_FAILURE() << miniattn::to_string(kernel) << " ran " << miniattn::to_string(k::precision_of<T>());
  } catch (const miniattn::RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find(refusal), std::string::npos) << e.what();
  }
}

// The fused kernel's bf16 version is a host kernel: the record says so, and a
// GPU build refuses it by name before any work.
TEST(KernelRecord, FusedComputesBf16OnHostBackendsOnly) {
  using miniattn::AttentionKernel;
  using miniattn::Precision;
  namespace k = miniattn::kernels;
  EXPECT_EQ(k::attention_kernel_precision_refusal(AttentionKernel::fused, Precision::bf16), "");
  EXPECT_EQ(k::attention_kernel_backend_refusal(AttentionKernel::fused, Precision::bf16, k::Backend::host), "");
  EXPECT_EQ(k::attention_kernel_backend_refusal(AttentionKernel::fused, Precision::bf16, k::Backend::cuda),
            "the fused kernel computes bf16 on host backends only, and this build runs on CUDA");
  EXPECT_EQ(k::attention_kernel_backend_refusal(AttentionKernel::fused, Precision::fp32, k::Backend::hip), "");
  miniattn::KernelConfig fused;
  fused.attention = AttentionKernel::fused;
  const k::TeamScratchLimits gpu{48 * 1024, true};  // a host build choosing as a GPU build would
  try {
    k::choose_attention_tiles<miniattn::bf16>(fused, 64, gpu);
    ADD_FAILURE() << "a GPU's bf16 run took the fused kernel";
  } catch (const miniattn::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("host backends only"), std::string::npos) << e.what();
  }
  EXPECT_EQ(k::choose_attention_tiles<float>(fused, 64, gpu).blocking.kernel, AttentionKernel::fused);
}

TEST(KernelRecord, DispatchRefusesWhatTheRecordDoesNotCompute) {
  using miniattn::AttentionKernel;
  expect_dispatch_refuses<float>(AttentionKernel::cudnn);
  expect_dispatch_refuses<double>(AttentionKernel::cudnn);
}
