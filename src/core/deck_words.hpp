#pragma once
// The deck's vocabulary: its enumerations with their words, the sizes a
// precision stores, and the kernels section. kernels/ and comm/ include this
// instead of core/config.hpp, which holds the whole deck.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace miniattn {

// The deck's enumerations: parsed once into these, compared as these. Each
// enumeration's deck words, enum_names<E>() in declaration order, stand beside it.
template <class E>
const std::vector<std::string>& enum_names();
#define MINIATTN_DECK_WORDS(E, ...)                                \
  template <>                                                      \
  inline const std::vector<std::string>& enum_names<E>() {         \
    static const std::vector<std::string> words = {__VA_ARGS__};   \
    return words;                                                  \
  }

enum class Precision { fp32, fp64, bf16 };
MINIATTN_DECK_WORDS(Precision, "fp32", "fp64", "bf16")
// How the model knows where a token is: a learned table wpe, or rotary
// embeddings of q and k (docs/design.md section 1.1).
enum class PositionEncoding { learned, rope };
MINIATTN_DECK_WORDS(PositionEncoding, "learned", "rope")
enum class Strategy { local, rsa, ring, ulysses, hybrid, allgather };
MINIATTN_DECK_WORDS(Strategy, "local", "rsa", "ring", "ulysses", "hybrid", "allgather")
enum class Layout { contiguous, zigzag, striped };
MINIATTN_DECK_WORDS(Layout, "contiguous", "zigzag", "striped")
enum class CommBackend { mpi, nccl };
MINIATTN_DECK_WORDS(CommBackend, "mpi", "nccl")
// Whether MPI may be handed device memory: auto asks the MPI library (host memory never needs staging).
enum class GpuAwareMpi { automatic, yes, no };
MINIATTN_DECK_WORDS(GpuAwareMpi, "auto", "true", "false")
enum class OptimizerKind { adamw, sgd };
MINIATTN_DECK_WORDS(OptimizerKind, "adamw", "sgd")
enum class RunMode { train, bench, predict, calibrate };
MINIATTN_DECK_WORDS(RunMode, "train", "bench", "predict", "calibrate")
// The attention kernels: the tiled online-softmax kernel or chunked attention
// through GEMMs; auto picks per backend (kernels::choose_attention_tiles).
enum class AttentionKernel { automatic, fused, gemm, cudnn };
MINIATTN_DECK_WORDS(AttentionKernel, "auto", "fused", "gemm", "cudnn")
// Whether the backward pass recomputes each block's q, k, v and fc1 output
// (two GEMMs a block) or the forward pass keeps them: auto keeps them where
// the memory plan fits (perf/memory_plan.hpp, plan_memory_within).
enum class Recompute { automatic, always, never };
MINIATTN_DECK_WORDS(Recompute, "auto", "always", "never")

// kernels.cudnn_documents: how the cudnn kernel runs blocks with packed documents.
enum class CudnnDocuments { gemm, calls };
MINIATTN_DECK_WORDS(CudnnDocuments, "gemm", "calls")
// The synthetic task (model/synthetic_task.hpp): copy (each sample's second
// half repeats its first) or lookup (key-value pairs defined in the first
// quarter, then retrieved from context).
enum class DataTask { copy, lookup };
MINIATTN_DECK_WORDS(DataTask, "copy", "lookup")
#undef MINIATTN_DECK_WORDS

template <class E>
const char* to_string(E value) {
  return enum_names<E>()[static_cast<std::size_t>(value)].c_str();
}

// The value a deck word names (the word already checked against enum_names<E>()).
template <class E>
E enum_of_word(const std::string& word) {
  const std::vector<std::string>& words = enum_names<E>();
  const auto found = std::find(words.begin(), words.end(), word);
  if (found == words.end()) throw std::invalid_argument("enum_of_word: '" + word + "' is not a deck word here");
  return static_cast<E>(found - words.begin());
}

// Bytes of each kind of value a run of `precision` stores (docs/design.md,
// "Precision"): activations and everything exchanged between layers (value),
// statistics and accumulators (acc), parameters, their gradients and the
// optimizer state (param). fp32 {4, 4, 4}, fp64 {8, 8, 8}, bf16 {2, 4, 4}.
struct ElementSizes {
  std::size_t value = 8, acc = 8, param = 8;
};
ElementSizes element_sizes(Precision precision);

// Blocking of the attention kernel (queries x keys per tile); 0 leaves the
// choice to the backend (kernels/attention/attention.hpp: cache-sized on the host,
// within level-0 team scratch on a GPU).
struct KernelConfig {
  AttentionKernel attention = AttentionKernel::automatic;
  std::int64_t chunk = 0;        // gemm: rows of a query and of a key chunk; 0: chosen per backend
  std::int64_t query_block = 0;  // fused: 0: chosen per backend (kernels::choose_attention_tiles)
  std::int64_t key_block = 0;
  // cudnn: its deterministic backward (false: cuDNN's default, dQ summed with
  // atomics); the host kernels are deterministic either way.
  bool deterministic = true;
  // cudnn, deterministic: the most MiB of cuDNN's workspace (0: what the memory plan leaves).
  double cudnn_workspace_mib = 0.0;
  // cudnn: blocks with packed documents on the gemm kernel whole, or as cuDNN
  // calls of one document each (a graph per new call shape).
  CudnnDocuments cudnn_documents = CudnnDocuments::gemm;
  std::size_t cudnn_workspace_limit_bytes() const {
    return static_cast<std::size_t>(cudnn_workspace_mib * 1024.0 * 1024.0);
  }
};

}  // namespace miniattn
