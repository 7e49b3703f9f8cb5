// cuDNN fused attention through cudnn-frontend 1.23 (cudnn_graphs.hpp).
//
// The one translation unit that includes cudnn-frontend (a header-only
// library whose templates take most of a minute to compile): it is built once
// into miniattn_cudnn, without Kokkos, with
//   CUDNN_FRONTEND_SKIP_JSON_LIB           no nlohmann JSON inside the frontend,
//   NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING  every cuDNN call through dlsym on
//                                          cudnn_frontend::cudnn_dlhandle, which
//                                          this file defines and fills (dlopen of
//                                          libcudnn.so.9); CUDA runtime calls the
//                                          frontend makes (the device's sm version,
//                                          workspace copies) go through its own
//                                          dlopen of libcudart.so.12 or .13.
// So nothing links libcudnn or libcudart, and a machine without a GPU can
// still load the library and validate graphs.
#include "kernels/attention/cudnn/cudnn_graphs.hpp"
#include "kernels/attention/cudnn/sdpa_shape_checks.hpp"

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>  // before the frontend: its shim calls std::strlen without including it (nvcc fails)
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cudnn_frontend.h>

#if !defined(NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
#error "cudnn_graphs.cpp loads libcudnn at run time: build it with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"
#endif

// The frontend declares this handle and leaves its definition to the program
// (cudnn_frontend_shim.h): every backend symbol is looked up in it. It must
// be set before the first frontend call, because the frontend caches each
// symbol it looks up in a function-local static (NV_FE_CALL_TO_BACKEND).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace miniattn::kernels {
namespace {

namespace fe = cudnn_frontend;
using namespace cudnn_detail;
using Graph = fe::graph::Graph;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The oldest cuDNN the frontend runs SDPA on without a known bug.
constexpr long kOldestCudnn = 91002;
// cuDNN 9.14.0 (in /usr/lib of the GPU image of 2026-11-28, beside the
// wheel's 9.19) has a bug with a left bound, no right bound and over 1024
// keys, and the frontend refuses such graphs (sdpa_support_surface.h).
// set_mask gives those calls a right bound that keeps every key instead.
constexpr long kCudnnWithLeftOnlyBandBug = 91400;

std::string version_string(long version) {
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

struct CudnnLibrary {
  std::string unavailable;  // "" when usable
  long version = 0;
};

CudnnLibrary load_cudnn_library() {
  CudnnLibrary lib;
  // The major version is part of the name: the frontend and cudnn.h here are
  // cuDNN 9's, and the 9.x backend ABI is stable across minor versions.
  const char* name = "libcudnn.so.9";
  dlerror();
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    lib.unavailable = std::string(name) + " not loadable: " + (why != nullptr ? why : "unknown dlopen error") +
                      " (put its directory on LD_LIBRARY_PATH)";
    return lib;
  }
  using GetVersion = std::size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  if (get_version == nullptr) {
    lib.unavailable = std::string(name) + " has no cudnnGetVersion";
    return lib;
  }
  lib.version = static_cast<long>(get_version());
  fe::cudnn_dlhandle = handle;
  if (lib.version < kOldestCudnn) {
    lib.unavailable = "cuDNN " + version_string(lib.version) + " (" + name + ") is older than " +
                      version_string(kOldestCudnn) + ", the oldest whose fused attention the frontend runs";
  }
  return lib;
}

// Loaded once per process (a thread-safe static), before any frontend call.
const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary lib = load_cudnn_library();
  return lib;
}

// Tensor uids, fixed so that execute() takes a uid -> pointer map without
// looking the graph's tensors up.
enum TensorUid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  // A ragged call's (SdpaRaggedShape): sequence lengths, and an offsets tensor for each ragged tensor.
  kSeqLenQ, kSeqLenKV, kQOffsets, kKOffsets, kVOffsets, kOOffsets, kDOOffsets, kDQOffsets, kDKOffsets, kDVOffsets
};

struct Layout {
  std::vector<int64_t> dim, stride;
};

// The call's rows of a block tensor, seen through the block's strides (the
// row offset is applied to the pointer): q, out, dout, dq [B, H, rows, Dh].
Layout query_layout(const SdpaCallShape& s) {
  const int64_t rows = s.query_rows, d = s.head_dim;
  return {{s.batch, s.heads, s.call.query_count, d}, {s.heads * rows * d, rows * d, d, 1}};
}

// k, v, dk, dv [B, KV, rows, Dh]: GQA is native (cuDNN maps query head h to key head h / (H / KV)).
Layout key_layout(const SdpaCallShape& s) {
  const int64_t rows = s.key_rows, d = s.head_dim;
  return {{s.batch, s.kv_heads, s.call.key_count, d}, {s.kv_heads * rows * d, rows * d, d, 1}};
}

// Stats / LSE of the call's rows only, [B, H, query_count] as cuDNN's
// [B, H, query_count, 1] (sdpa_call.hpp: compact, so that its base stays
// 16-byte aligned whatever row the call starts at).
Layout stats_layout(const SdpaCallShape& s) {
  const int64_t rows = s.call.query_count;
  return {{s.batch, s.heads, rows, 1}, {s.heads * rows, rows, 1, 1}};
}

TensorPtr input(Graph& graph, const char* name, TensorUid uid, const Layout& layout, fe::DataType_t type) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(layout.dim)
                          .set_stride(layout.stride)
                          .set_data_type(type));
}

void make_output(const TensorPtr& tensor, TensorUid uid, const Layout& layout, fe::DataType_t type) {
  tensor->set_output(true).set_uid(uid).set_dim(layout.dim).set_stride(layout.stride).set_data_type(type);
}

// The call's mask. The frontend's TOP_LEFT band (1.23: graph_properties.h,
// utils/attn_score_modifiers.h) keeps key j of query i iff
// j <= i + right_bound (a CMP_GE of row + right_bound against col) and
// j > i - left_bound (a CMP_GT of col + left_bound against row): exactly
// CudnnCall's convention, so the bounds pass unchanged. No bound: no mask node.
// A right bound of key_count - 1 keeps every key of every row (i >= 0).
template <class Attributes>
void set_mask(Attributes& attributes, const CudnnCall& call) {
  attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
  const bool left_only_bug = cudnn_library().version == kCudnnWithLeftOnlyBandBug && call.has_left_bound &&
                             !call.has_right_bound && call.key_count > 1024;
  if (call.has_right_bound) attributes.set_diagonal_band_right_bound(static_cast<int>(call.right_bound));
  else if (left_only_bug) attributes.set_diagonal_band_right_bound(static_cast<int>(call.key_count - 1));
  if (call.has_left_bound) attributes.set_diagonal_band_left_bound(static_cast<int>(call.left_bound));
}

float attention_scale(index_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

// How a graph is built. sm_version > 0 targets that architecture without
// asking a device (validate on a machine without a GPU); 0 asks the current
// device. deterministic: the backward's algorithm. kernel_cache (with dynamic
// shapes; null: neither): graphs of new shapes reuse the kernels built for
// earlier ones (CudnnSdpa's shared_kernels).
struct GraphOptions {
  int sm_version = 0;
  bool deterministic = true;
  std::shared_ptr<fe::KernelCache> kernel_cache;
};

// bf16 in and out, fp32 scores, softmax and accumulation (DESIGN.md section
// 4). Dynamic shapes before any node: a node copies the graph's context when made.
std::shared_ptr<Graph> new_graph(const GraphOptions& options) {
  auto graph = std::make_shared<Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  if (options.sm_version > 0) graph->set_sm_version(options.sm_version);
  if (options.kernel_cache) graph->set_dynamic_shape_enabled(true).set_kernel_cache(options.kernel_cache);
  return graph;
}

// The call's Q, K and V, inputs of both directions.
struct QueryKeyValue {
  TensorPtr q, k, v;
};
QueryKeyValue query_key_value(Graph& graph, const SdpaCallShape& s) {
  return {input(graph, "Q", kQ, query_layout(s), fe::DataType_t::BFLOAT16),
          input(graph, "K", kK, key_layout(s), fe::DataType_t::BFLOAT16),
          input(graph, "V", kV, key_layout(s), fe::DataType_t::BFLOAT16)};
}

// O and Stats (natural-log LSE of the scaled scores, which the online-softmax
// merge of the block results needs).
std::shared_ptr<Graph> forward_graph(const SdpaCallShape& s, const GraphOptions& options) {
  auto graph = new_graph(options);
  auto [q, k, v] = query_key_value(*graph, s);
  auto attributes = fe::graph::SDPA_attributes()
                        .set_name("miniattn_sdpa_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(attention_scale(s.head_dim));
  set_mask(attributes, s.call);
  auto [o, stats] = graph->sdpa(q, k, v, std::move(attributes));
  make_output(o, kO, query_layout(s), fe::DataType_t::BFLOAT16);
  make_output(stats, kStats, stats_layout(s), fe::DataType_t::FLOAT);
  return graph;
}

// dQ, dK, dV from the GLOBAL O and Stats (cuDNN recomputes D = rowsum(dO * O)
// from the O it is given, so the global output yields this call's exact
// share). Deterministic: on Hopper dQ is reduced without atomics, so a run
// repeats bit for bit (the project's determinism checks need it), through a
// bf16 dS of every pair of the call; otherwise (kernels.deterministic: false)
// dQ is summed in an fp32 workspace with atomics.
std::shared_ptr<Graph> backward_graph(const SdpaCallShape& s, const GraphOptions& options) {
  auto graph = new_graph(options);
  auto [q, k, v] = query_key_value(*graph, s);
  auto o = input(*graph, "O", kO, query_layout(s), fe::DataType_t::BFLOAT16);
  auto dout = input(*graph, "dO", kDO, query_layout(s), fe::DataType_t::BFLOAT16);
  auto stats = input(*graph, "Stats", kStats, stats_layout(s), fe::DataType_t::FLOAT);
  auto attributes = fe::graph::SDPA_backward_attributes()
                        .set_name("miniattn_sdpa_backward")
                        .set_attn_scale(attention_scale(s.head_dim))
                        .set_deterministic_algorithm(options.deterministic);
  set_mask(attributes, s.call);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, std::move(attributes));
  make_output(dq, kDQ, query_layout(s), fe::DataType_t::BFLOAT16);
  make_output(dk, kDK, key_layout(s), fe::DataType_t::BFLOAT16);
  make_output(dv, kDV, key_layout(s), fe::DataType_t::BFLOAT16);
  return graph;
}

std::shared_ptr<Graph> make_graph(const SdpaCallShape& s, bool backward, const GraphOptions& options) {
  return backward ? backward_graph(s, options) : forward_graph(s, options);
}

// Frontend errors become exceptions that say which graph and which step.
void check(fe::error_t status, const std::string& graph, const char* step) {
  if (status.is_bad()) throw std::runtime_error("cuDNN " + graph + ": " + step + ": " + status.get_message());
}

// Everything that identifies a graph: the shape without the row offsets
// (they only move the pointers), the bounds only where present, the direction.
using GraphKey = std::array<index_t, 13>;

GraphKey graph_key(const SdpaCallShape& s, bool backward) {
  const CudnnCall& c = s.call;
  return {s.batch,
          s.heads,
          s.kv_heads,
          s.head_dim,
          s.query_rows,
          s.key_rows,
          c.query_count,
          c.key_count,
          c.has_right_bound ? 1 : 0,
          c.has_right_bound ? c.right_bound : 0,
          c.has_left_bound ? 1 : 0,
          c.has_left_bound ? c.left_bound : 0,
          backward ? 1 : 0};
}

// ---- ragged calls (SdpaRaggedShape)

// A sequence's place is its ragged offset, so the batch stride is the row
// stride, as the frontend's own THD tests declare it.
Layout ragged_query_layout(const SdpaRaggedShape& s) {
  return {{s.sequences, s.heads, s.max_query_count, s.head_dim},
          {s.query_row_stride, s.query_head_stride, s.query_row_stride, 1}};
}
Layout ragged_key_layout(const SdpaRaggedShape& s) {
  return {{s.sequences, s.kv_heads, s.max_key_count, s.head_dim},
          {s.key_row_stride, s.key_head_stride, s.key_row_stride, 1}};
}
Layout ragged_stats_layout(const SdpaRaggedShape& s) {
  const int64_t rows = s.max_query_count;
  return {{s.sequences, s.heads, rows, 1}, {s.heads * rows, rows, 1, 1}};
}

TensorPtr ragged_offsets(Graph& graph, const char* tensor, TensorUid uid, const SdpaRaggedShape& s) {
  const std::string name = std::string(tensor) + "_ragged_offsets";
  return input(graph, name.c_str(), uid, {{s.sequences + 1, 1, 1, 1}, {1, 1, 1, 1}}, fe::DataType_t::INT64);
}

TensorPtr sequence_lengths(Graph& graph, const char* name, TensorUid uid, const SdpaRaggedShape& s) {
  return input(graph, name, uid, {{s.sequences, 1, 1, 1}, {1, 1, 1, 1}}, fe::DataType_t::INT32);
}

// Padding and, for causal, a top-left diagonal per sequence (the frontend
// wants an alignment and the padding mask with ragged tensors).
template <class Attributes>
void set_ragged_mask(Attributes& attributes, Graph& graph, const SdpaRaggedShape& s) {
  attributes.set_padding_mask(true)
      .set_seq_len_q(sequence_lengths(graph, "seq_len_q", kSeqLenQ, s))
      .set_seq_len_kv(sequence_lengths(graph, "seq_len_kv", kSeqLenKV, s))
      .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
  if (s.causal) attributes.set_diagonal_band_right_bound(0);
}

struct RaggedInput {
  const char* name;
  TensorUid uid, offsets_uid;
  bool query_rows;
};

TensorPtr ragged_input(Graph& graph, const SdpaRaggedShape& s, const RaggedInput& in) {
  const Layout layout = in.query_rows ? ragged_query_layout(s) : ragged_key_layout(s);
  auto tensor = input(graph, in.name, in.uid, layout, fe::DataType_t::BFLOAT16);
  tensor->set_ragged_offset(ragged_offsets(graph, in.name, in.offsets_uid, s));
  return tensor;
}

void make_ragged_output(Graph& graph, const TensorPtr& tensor, const SdpaRaggedShape& s, const RaggedInput& out) {
  make_output(tensor, out.uid, out.query_rows ? ragged_query_layout(s) : ragged_key_layout(s),
              fe::DataType_t::BFLOAT16);
  tensor->set_ragged_offset(ragged_offsets(graph, out.name, out.offsets_uid, s));
}

std::shared_ptr<Graph> ragged_forward_graph(const SdpaRaggedShape& s, const GraphOptions& options) {
  auto graph = new_graph(options);
  auto q = ragged_input(*graph, s, {"Q", kQ, kQOffsets, true});
  auto k = ragged_input(*graph, s, {"K", kK, kKOffsets, false});
  auto v = ragged_input(*graph, s, {"V", kV, kVOffsets, false});
  auto attributes = fe::graph::SDPA_attributes()
                        .set_name("miniattn_ragged_sdpa_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(attention_scale(s.head_dim));
  set_ragged_mask(attributes, *graph, s);
  auto [o, stats] = graph->sdpa(q, k, v, std::move(attributes));
  make_ragged_output(*graph, o, s, {"O", kO, kOOffsets, true});
  make_output(stats, kStats, ragged_stats_layout(s), fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<Graph> ragged_backward_graph(const SdpaRaggedShape& s, const GraphOptions& options) {
  auto graph = new_graph(options);
  auto q = ragged_input(*graph, s, {"Q", kQ, kQOffsets, true});
  auto k = ragged_input(*graph, s, {"K", kK, kKOffsets, false});
  auto v = ragged_input(*graph, s, {"V", kV, kVOffsets, false});
  auto o = ragged_input(*graph, s, {"O", kO, kOOffsets, true});
  auto dout = ragged_input(*graph, s, {"dO", kDO, kDOOffsets, true});
  auto stats = input(*graph, "Stats", kStats, ragged_stats_layout(s), fe::DataType_t::FLOAT);
  auto attributes = fe::graph::SDPA_backward_attributes()
                        .set_name("miniattn_ragged_sdpa_backward")
                        .set_attn_scale(attention_scale(s.head_dim))
                        .set_deterministic_algorithm(options.deterministic);
  set_ragged_mask(attributes, *graph, s);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, std::move(attributes));
  make_ragged_output(*graph, dq, s, {"dQ", kDQ, kDQOffsets, true});
  make_ragged_output(*graph, dk, s, {"dK", kDK, kDKOffsets, false});
  make_ragged_output(*graph, dv, s, {"dV", kDV, kDVOffsets, false});
  return graph;
}

std::shared_ptr<Graph> make_ragged_graph(const SdpaRaggedShape& s, bool backward, const GraphOptions& options) {
  return backward ? ragged_backward_graph(s, options) : ragged_forward_graph(s, options);
}

using RaggedGraphKey = std::array<index_t, 12>;

RaggedGraphKey ragged_graph_key(const SdpaRaggedShape& s, bool backward) {
  return {s.sequences,         s.heads,           s.kv_heads,         s.head_dim,
          s.max_query_count,   s.max_key_count,   s.query_head_stride, s.query_row_stride,
          s.key_head_stride,   s.key_row_stride,  s.causal ? 1 : 0,   backward ? 1 : 0};
}

// The device arrays every ragged tensor's offsets and the padding mask read.
void add_ragged_rows(std::unordered_map<int64_t, void*>& pack, const SdpaRaggedRows& rows, bool backward) {
  const auto device = [](const void* p, const char* what) {
    if (p == nullptr) throw std::runtime_error(std::string("cuDNN ragged SDPA: ") + what + " is null");
    return const_cast<void*>(p);
  };
  pack[kSeqLenQ] = device(rows.query_counts, "query_counts");
  pack[kSeqLenKV] = device(rows.key_counts, "key_counts");
  void* query_offsets = device(rows.query_offsets, "query_offsets");
  void* key_offsets = device(rows.key_offsets, "key_offsets");
  for (const TensorUid uid : {kQOffsets, kOOffsets}) pack[uid] = query_offsets;
  for (const TensorUid uid : {kKOffsets, kVOffsets}) pack[uid] = key_offsets;
  if (!backward) return;
  for (const TensorUid uid : {kDOOffsets, kDQOffsets}) pack[uid] = query_offsets;
  for (const TensorUid uid : {kDKOffsets, kDVOffsets}) pack[uid] = key_offsets;
}

}  // namespace

std::string cudnn_unavailable_reason() { return cudnn_library().unavailable; }

long cudnn_library_version() { return cudnn_library().version; }

std::string validate_sdpa_graph(const SdpaCallShape& shape, bool backward, int sm_version, bool deterministic,
                                bool shared_kernels) {
  if (const std::string why = cudnn_unavailable_reason(); !why.empty()) return why;
  if (const std::string why = shape_error(shape); !why.empty()) return describe(shape, backward) + ": " + why;
  try {
    const GraphOptions options{sm_version, deterministic,
                               shared_kernels ? std::make_shared<fe::KernelCache>() : nullptr};
    auto graph = make_graph(shape, backward, options);
    auto status = graph->validate();
    return status.is_good() ? "" : status.get_message();
  } catch (const std::exception& e) {
    // The frontend throws where it cannot return an error (no implementation
    // for the attributes, a missing symbol).
    return e.what();
  }
}

std::string validate_sdpa_ragged_graph(const SdpaRaggedShape& shape, bool backward, int sm_version,
                                       bool deterministic) {
  if (const std::string why = cudnn_unavailable_reason(); !why.empty()) return why;
  if (const std::string why = ragged_shape_error(shape); !why.empty())
    return describe_ragged(shape, backward) + ": " + why;
  try {
    auto status = make_ragged_graph(shape, backward, {sm_version, deterministic, nullptr})->validate();
    return status.is_good() ? "" : status.get_message();
  } catch (const std::exception& e) {
    return e.what();
  }
}

struct CudnnSdpa::Impl {
  struct Built {
    std::shared_ptr<Graph> graph;
    std::size_t workspace = 0;
  };
  cudnnHandle_t handle = nullptr;
  GraphOptions options;  // on the device (sm_version 0)
  std::map<GraphKey, Built> graphs;
  std::map<RaggedGraphKey, Built> ragged_graphs;

  Built build(std::shared_ptr<Graph> graph, const std::string& what) const;
  const Built& get(const SdpaCallShape& s, bool backward);
  const Built& get_ragged(const SdpaRaggedShape& s, bool backward);
  // get(), and the caller's workspace checked against the graph's need.
  const Built& ready(const SdpaCallShape& s, bool backward, const void* workspace) {
    return with_workspace(get(s, backward), describe(s, backward), workspace);
  }
  const Built& ready_ragged(const SdpaRaggedShape& s, bool backward, const void* workspace) {
    return with_workspace(get_ragged(s, backward), describe_ragged(s, backward), workspace);
  }
  static const Built& with_workspace(const Built& built, const std::string& what, const void* workspace) {
    if (built.workspace > 0 && workspace == nullptr)
      throw std::runtime_error("cuDNN " + what + ": needs a workspace of " + std::to_string(built.workspace) +
                               " bytes");
    return built;
  }
};

CudnnSdpa::Impl::Built CudnnSdpa::Impl::build(std::shared_ptr<Graph> graph, const std::string& what) const {
  Built built;
  built.graph = std::move(graph);
  check(built.graph->validate(), what, "validate");
  check(built.graph->build_operation_graph(handle), what, "build_operation_graph");
  check(built.graph->create_execution_plans({fe::HeurMode_t::A}), what, "create_execution_plans");
  check(built.graph->check_support(), what, "check_support");
  check(built.graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), what, "build_plans");
  int64_t workspace = 0;
  check(built.graph->get_workspace_size(workspace), what, "get_workspace_size");
  built.workspace = static_cast<std::size_t>(workspace);
  return built;
}

// Built once per key; the device picks the architecture (sm_version 0).
const CudnnSdpa::Impl::Built& CudnnSdpa::Impl::get(const SdpaCallShape& s, bool backward) {
  const GraphKey key = graph_key(s, backward);
  if (auto found = graphs.find(key); found != graphs.end()) return found->second;
  if (const std::string why = shape_error(s); !why.empty()) {
    throw std::runtime_error("cuDNN " + describe(s, backward) + ": " + why);
  }
  Built built = build(make_graph(s, backward, options), describe(s, backward));
  return graphs.emplace(key, std::move(built)).first->second;
}

const CudnnSdpa::Impl::Built& CudnnSdpa::Impl::get_ragged(const SdpaRaggedShape& s, bool backward) {
  const RaggedGraphKey key = ragged_graph_key(s, backward);
  if (auto found = ragged_graphs.find(key); found != ragged_graphs.end()) return found->second;
  if (const std::string why = ragged_shape_error(s); !why.empty())
    throw std::runtime_error("cuDNN " + describe_ragged(s, backward) + ": " + why);
  Built built = build(make_ragged_graph(s, backward, options), describe_ragged(s, backward));
  return ragged_graphs.emplace(key, std::move(built)).first->second;
}

CudnnSdpa::CudnnSdpa(void* cuda_stream, bool deterministic_backward, bool shared_kernels)
    : impl_(std::make_unique<Impl>()) {
  impl_->options.deterministic = deterministic_backward;
  if (shared_kernels) impl_->options.kernel_cache = std::make_shared<fe::KernelCache>();
  if (const std::string why = cudnn_unavailable_reason(); !why.empty()) {
    throw std::runtime_error("kernels.attention: cudnn: " + why);
  }
  if (const cudnnStatus_t status = fe::detail::create_handle(&impl_->handle); status != CUDNN_STATUS_SUCCESS) {
    impl_->handle = nullptr;
    throw std::runtime_error(std::string("kernels.attention: cudnn: cudnnCreate failed (a GPU is needed): ") +
                             fe::detail::get_error_string(status));
  }
  if (const cudnnStatus_t status = fe::detail::set_stream(impl_->handle, static_cast<cudaStream_t>(cuda_stream));
      status != CUDNN_STATUS_SUCCESS) {
    fe::detail::destroy_handle(impl_->handle);
    impl_->handle = nullptr;
    throw std::runtime_error(std::string("kernels.attention: cudnn: cudnnSetStream failed: ") +
                             fe::detail::get_error_string(status));
  }
}

// The plans hold descriptors made with the handle: they go first.
CudnnSdpa::~CudnnSdpa() {
  impl_->graphs.clear();
  impl_->ragged_graphs.clear();
  if (impl_->handle != nullptr) fe::detail::destroy_handle(impl_->handle);
}

std::size_t CudnnSdpa::prepare(const SdpaCallShape& shape, bool backward) {
  return impl_->get(shape, backward).workspace;
}

void CudnnSdpa::forward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, void* out,
                        float* stats, void* workspace) {
  const Impl::Built& built = impl_->ready(shape, false, workspace);
  const index_t qe = query_element_offset(shape), ke = key_element_offset(shape);
  std::unordered_map<int64_t, void*> pack{
      {kQ, at_row(q, qe, 2, "q")},
      {kK, at_row(k, ke, 2, "k")},
      {kV, at_row(v, ke, 2, "v")},
      {kO, at_row(out, qe, 2, "out")},
      {kStats, at_row(stats, 0, sizeof(float), "stats")},
  };
  check(built.graph->execute(impl_->handle, pack, workspace), describe(shape, false), "execute");
}

void CudnnSdpa::backward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, const void* out,
                         const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace) {
  const Impl::Built& built = impl_->ready(shape, true, workspace);
  const index_t qe = query_element_offset(shape), ke = key_element_offset(shape);
  std::unordered_map<int64_t, void*> pack{
      {kQ, at_row(q, qe, 2, "q")},
      {kK, at_row(k, ke, 2, "k")},
      {kV, at_row(v, ke, 2, "v")},
      {kO, at_row(out, qe, 2, "out")},
      {kDO, at_row(dout, qe, 2, "dout")},
      {kStats, at_row(lse, 0, sizeof(float), "lse")},
      {kDQ, at_row(dq, qe, 2, "dq")},
      {kDK, at_row(dk, ke, 2, "dk")},
      {kDV, at_row(dv, ke, 2, "dv")},
  };
  check(built.graph->execute(impl_->handle, pack, workspace), describe(shape, true), "execute");
}

std::size_t CudnnSdpa::prepare_ragged(const SdpaRaggedShape& shape, bool backward) {
  return impl_->get_ragged(shape, backward).workspace;
}

void CudnnSdpa::ragged_forward(const SdpaRaggedShape& shape, const SdpaRaggedRows& rows, const void* q,
                               const void* k, const void* v, void* out, float* stats, void* workspace) {
  const Impl::Built& built = impl_->ready_ragged(shape, false, workspace);
  std::unordered_map<int64_t, void*> pack{
      {kQ, at_row(q, 0, 2, "q")},         {kK, at_row(k, 0, 2, "k")},
      {kV, at_row(v, 0, 2, "v")},         {kO, at_row(out, 0, 2, "out")},
      {kStats, at_row(stats, 0, sizeof(float), "stats")},
  };
  add_ragged_rows(pack, rows, false);
  check(built.graph->execute(impl_->handle, pack, workspace), describe_ragged(shape, false), "execute");
}

void CudnnSdpa::ragged_backward(const SdpaRaggedShape& shape, const SdpaRaggedRows& rows, const void* q,
                                const void* k, const void* v, const void* out, const void* dout, const float* lse,
                                void* dq, void* dk, void* dv, void* workspace) {
  const Impl::Built& built = impl_->ready_ragged(shape, true, workspace);
  std::unordered_map<int64_t, void*> pack{
      {kQ, at_row(q, 0, 2, "q")},          {kK, at_row(k, 0, 2, "k")},   {kV, at_row(v, 0, 2, "v")},
      {kO, at_row(out, 0, 2, "out")},      {kDO, at_row(dout, 0, 2, "dout")},
      {kStats, at_row(lse, 0, sizeof(float), "lse")},
      {kDQ, at_row(dq, 0, 2, "dq")},       {kDK, at_row(dk, 0, 2, "dk")}, {kDV, at_row(dv, 0, 2, "dv")},
  };
  add_ragged_rows(pack, rows, true);
  check(built.graph->execute(impl_->handle, pack, workspace), describe_ragged(shape, true), "execute");
}

int CudnnSdpa::graphs_built() const {
  return static_cast<int>(impl_->graphs.size() + impl_->ragged_graphs.size());
}

}  // namespace miniattn::kernels
