// cuDNN's SDPA graphs (src/kernels/attention/cudnn/cudnn_graphs.cpp) built and
// validated for Hopper (sm 90) on a machine without a GPU: every graph the
// test decks' kernels.attention: cudnn runs needs, forward and backward, must
// pass cudnn-frontend's validate(), and graphs cuDNN cannot run must not.
// validate() checks the frontend's support surface (data types, head dim, GQA,
// mask bounds, cuDNN version quirks) against the libcudnn.so.9 loaded at run
// time; the later steps (plans, execution) need a GPU.
// No MPI, no Kokkos: its own main (GTest::gtest_main).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/attention/cudnn/cudnn_graphs.hpp"

namespace miniattn::kernels {
namespace {

constexpr int kHopper = 90;

struct Mask {
  const char* name;
  bool has_right_bound;
  index_t right_bound;
  bool has_left_bound;
  index_t left_bound;
};

// The masks the block planner (block_plan.hpp) emits for the decks' rules:
// none, causal, causal with a window, and a window without causal (a band
// on both sides of the diagonal, which shows keys up to right_bound ahead).
const Mask kMasks[] = {
    {"full", false, 0, false, 0},
    {"causal", true, 0, false, 0},
    {"causal window 5", true, 0, true, 5},
    {"causal window 256", true, 0, true, 256},
    {"band left 6 right 5", true, 5, true, 6},
    {"band left 64 right 63", true, 63, true, 64},
};

SdpaCallShape call_shape(index_t batch, index_t heads, index_t kv_heads, index_t head_dim, index_t query_count,
                         index_t key_count, const Mask& mask) {
  SdpaCallShape s;
  s.batch = batch;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  // A call inside larger block tensors, at row offsets: the graph sees the
  // rows through the block's strides, the offsets only move the pointers.
  s.query_rows = query_count + 24;
  s.key_rows = key_count + 8;
  s.call.query_offset = 16;
  s.call.query_count = query_count;
  s.call.key_offset = 8;
  s.call.key_count = key_count;
  s.call.has_right_bound = mask.has_right_bound;
  s.call.right_bound = mask.right_bound;
  s.call.has_left_bound = mask.has_left_bound;
  s.call.left_bound = mask.left_bound;
  return s;
}

std::string label(const SdpaCallShape& s, const Mask& mask, bool backward) {
  return std::string(backward ? "backward" : "forward") + " B=" + std::to_string(s.batch) +
         " H=" + std::to_string(s.heads) + " KV=" + std::to_string(s.kv_heads) +
         " Dh=" + std::to_string(s.head_dim) + " " + std::to_string(s.call.query_count) + "x" +
         std::to_string(s.call.key_count) + " " + mask.name;
}

TEST(CudnnGraphs, LibraryLoadsAndIsRecentEnough) {
  EXPECT_EQ(cudnn_unavailable_reason(), "");
  EXPECT_GE(cudnn_library_version(), 91002) << "cuDNN >= 9.10.2 is required";
}

TEST(CudnnGraphs, DeckGraphsValidateForHopper) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  // Call rectangles: square blocks (128 rows a rank), a ring step's halves
  // (fewer queries than keys), and an odd remainder. A window refuses more
  // queries than keys (see RefusesWhatCudnnCannotRun), so those come only
  // with masks without a left bound.
  struct Rect {
    index_t queries, keys;
  };
  const Rect rects[] = {{128, 128}, {64, 128}, {37, 93}};
  const Rect taller = {128, 64};
  for (index_t batch : {1, 2})
    for (index_t kv_heads : {4, 2, 1})
      for (index_t head_dim : {64, 128})
        for (const Mask& mask : kMasks) {
          std::vector<Rect> shapes(std::begin(rects), std::end(rects));
          if (!mask.has_left_bound) shapes.push_back(taller);
          for (const Rect& r : shapes)
            for (bool backward : {false, true}) {
              const SdpaCallShape s = call_shape(batch, 4, kv_heads, head_dim, r.queries, r.keys, mask);
              EXPECT_EQ(validate_sdpa_graph(s, backward, kHopper), "") << label(s, mask, backward);
            }
        }
}

// kernels.deterministic: false builds the backward without cuDNN's
// deterministic algorithm: the same shapes must validate that way too.
TEST(CudnnGraphs, NonDeterministicBackwardValidatesForHopper) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  for (index_t kv_heads : {4, 1})
    for (const Mask& mask : kMasks) {
      const SdpaCallShape s = call_shape(1, 4, kv_heads, 64, 64, 128, mask);
      EXPECT_EQ(validate_sdpa_graph(s, true, kHopper, /*deterministic=*/false), "") << label(s, mask, true);
    }
}

// bench_cudnn_documents builds a graph per document length with dynamic
// shapes and one kernel cache (CudnnSdpa's shared_kernels): cudnn-frontend
// must take such graphs, both directions and both backward algorithms.
TEST(CudnnGraphs, GraphsSharingKernelsValidateForHopper) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  for (const Mask& mask : {kMasks[0], kMasks[1]})
    for (bool backward : {false, true})
      for (bool deterministic : {true, false}) {
        const SdpaCallShape s = call_shape(1, 4, 4, 64, 300, 300, mask);
        EXPECT_EQ(validate_sdpa_graph(s, backward, kHopper, deterministic, /*shared_kernels=*/true), "")
            << label(s, mask, backward) << (deterministic ? "" : " non-deterministic");
      }
}

TEST(CudnnGraphs, OffsetsDoNotChangeTheGraph) {
  const Mask& causal = kMasks[1];
  SdpaCallShape s = call_shape(1, 4, 2, 64, 64, 64, causal);
  const std::string at_offsets = validate_sdpa_graph(s, true, kHopper);
  s.call.query_offset = 0;
  s.call.key_offset = 0;
  EXPECT_EQ(validate_sdpa_graph(s, true, kHopper), at_offsets);
  EXPECT_EQ(at_offsets, "");
}

// A window whose keys all lie before its queries needs no right bound, and the
// planner leaves it out (block_plan.cpp: call_rows). cuDNN 9.14.0 has a bug
// with exactly that over 1024 keys, which the frontend refuses; the graph
// must still validate there (cudnn_graphs.cpp: set_mask), and everywhere else.
TEST(CudnnGraphs, LeftOnlyWindowOverManyKeysValidates) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  const Mask left_only = {"left 1500 only", false, 0, true, 1500};
  for (bool backward : {false, true}) {
    const SdpaCallShape s = call_shape(1, 4, 4, 64, 2048, 2048, left_only);
    EXPECT_EQ(validate_sdpa_graph(s, backward, kHopper), "") << label(s, left_only, backward);
  }
}

// Graphs cuDNN cannot run fail validate() with the frontend's reason, so a
// case above cannot pass by validating nothing.
TEST(CudnnGraphs, RefusesWhatCudnnCannotRun) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  const Mask& causal = kMasks[1];
  for (bool backward : {false, true}) {
    // Head dim not a multiple of 8 (both directions; the backward also refuses > 256).
    const std::string head_dim = validate_sdpa_graph(call_shape(1, 4, 4, 260, 128, 128, causal), backward, kHopper);
    EXPECT_NE(head_dim.find("multiple of 8"), std::string::npos) << head_dim;
    // Query heads not a multiple of the key heads.
    const std::string gqa = validate_sdpa_graph(call_shape(1, 4, 3, 64, 128, 128, causal), backward, kHopper);
    EXPECT_NE(gqa.find("group-query attention"), std::string::npos) << gqa;
    // A negative right bound (keys all after the query of the same index): the planner must shift rows instead.
    const Mask ahead = {"right -1", true, -1, false, 0};
    const std::string right = validate_sdpa_graph(call_shape(1, 4, 4, 64, 128, 128, ahead), backward, kHopper);
    EXPECT_NE(right.find("Right bound"), std::string::npos) << right;
    // A window with more queries than keys (no padding mask): cuDNN 9.19 refuses it, 9.14.0
    // validated it (an H200 image, 2026-11-28). The planner never asks (block_plan.cpp).
    const std::string tall = validate_sdpa_graph(call_shape(1, 4, 4, 64, 128, 64, kMasks[2]), backward, kHopper);
    if (cudnn_library_version() != 91400) {
      EXPECT_NE(tall.find("max_s_q <= max_s_kv"), std::string::npos) << tall;
    }
  }
  // The backward refuses head dims over 256 on Hopper, and one query against one key.
  const std::string wide = validate_sdpa_graph(call_shape(1, 4, 4, 264, 128, 128, causal), true, kHopper);
  EXPECT_NE(wide.find("less than or equal to 256"), std::string::npos) << wide;
  const std::string single = validate_sdpa_graph(call_shape(1, 4, 4, 64, 1, 1, kMasks[0]), true, kHopper);
  EXPECT_NE(single.find("s_q = s_kv = 1"), std::string::npos) << single;
}

// The ragged calls tests/attention/bench_cudnn_documents.cpp times on a GPU:
// packed documents of a [B, H, N, Dh] block in place (head stride N Dh, row
// stride Dh) and in a packed [tokens, H, Dh] copy, causal or not, both
// backward algorithms. validate() passes both strides; which ones cuDNN's
// kernels take only a GPU tells.
SdpaRaggedShape ragged_shape(index_t kv_heads, bool in_place, bool causal) {
  SdpaRaggedShape s;
  s.sequences = 5;
  s.heads = 4;
  s.kv_heads = kv_heads;
  s.head_dim = 64;
  s.max_query_count = s.max_key_count = 512;
  const index_t block_rows = 4096;
  s.query_head_stride = in_place ? block_rows * s.head_dim : s.head_dim;
  s.query_row_stride = in_place ? s.head_dim : s.heads * s.head_dim;
  s.key_head_stride = in_place ? block_rows * s.head_dim : s.head_dim;
  s.key_row_stride = in_place ? s.head_dim : kv_heads * s.head_dim;
  s.causal = causal;
  return s;
}

TEST(CudnnGraphs, RaggedDocumentGraphsValidateForHopper) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  for (index_t kv_heads : {4, 1})
    for (bool in_place : {true, false})
      for (bool causal : {true, false}) {
        const SdpaRaggedShape s = ragged_shape(kv_heads, in_place, causal);
        const std::string what = std::string(in_place ? "in place" : "packed") + (causal ? " causal" : " full") +
                                 " KV=" + std::to_string(kv_heads);
        EXPECT_EQ(validate_sdpa_ragged_graph(s, false, kHopper), "") << "forward " << what;
        EXPECT_EQ(validate_sdpa_ragged_graph(s, true, kHopper), "") << "backward " << what;
        EXPECT_EQ(validate_sdpa_ragged_graph(s, true, kHopper, /*deterministic=*/false), "")
            << "non-deterministic backward " << what;
      }
}

// The ragged graphs reach the frontend's checks (a head dim it refuses), and our own come first.
TEST(CudnnGraphs, RaggedGraphsRefuseWhatCudnnCannotRun) {
  ASSERT_EQ(cudnn_unavailable_reason(), "");
  SdpaRaggedShape s = ragged_shape(4, true, true);
  s.head_dim = 260;
  for (bool backward : {false, true}) {
    const std::string head_dim = validate_sdpa_ragged_graph(s, backward, kHopper);
    EXPECT_NE(head_dim.find("multiple of 8"), std::string::npos) << head_dim;
  }
  s = ragged_shape(3, true, true);
  const std::string gqa = validate_sdpa_ragged_graph(s, false, kHopper);
  EXPECT_NE(gqa.find("group-query attention"), std::string::npos) << gqa;
  s = ragged_shape(4, true, true);
  s.key_row_stride = 0;
  const std::string stride = validate_sdpa_ragged_graph(s, false, kHopper);
  EXPECT_NE(stride.find("strides must be positive"), std::string::npos) << stride;
}

// Our own contract, checked before cuDNN sees the graph.
TEST(CudnnGraphs, RefusesCallsOutsideTheBlock) {
  SdpaCallShape s = call_shape(1, 4, 4, 64, 128, 128, kMasks[1]);
  s.call.query_offset = s.query_rows - 64;
  const std::string outside = validate_sdpa_graph(s, false, kHopper);
  EXPECT_NE(outside.find("outside the block"), std::string::npos) << outside;
}

}  // namespace
}  // namespace miniattn::kernels
