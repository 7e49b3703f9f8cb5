#pragma once
// Names, shapes and places of every parameter (docs/design.md section 1), the same
// names as a PyTorch state_dict. Parameters live in two flat buffers:
//  * replicated: everything but wpe. Its first part, [0, tensor_parallel_begin()),
//    is identical on every rank and its gradient is summed over all ranks; the
//    rest holds this rank's tensor-parallel shards of the QKV, proj, fc1 and fc2
//    weights (and the QKV and fc1 biases), identical on the ranks of the same
//    TP index, their gradients summed over those (the shard group). With tp = 1
//    a shard is the whole tensor.
//  * sharded: the wpe rows of the positions this rank owns (sequence-split
//    embeddings); read, written and reduced by rows. Empty with rotary
//    positions (model.positions rope), which have no wpe.
// With pipeline parallelism a rank holds only its stage's tensors (held):
// the blocks of its model chunks (one, or v interleaved), wte and wpe on the
// first stage, ln_f and wte (the tied head) on the last. The list names every parameter of the model on every rank, in
// model order (initialisation and the files' collective calls key on it).
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/types.hpp"

namespace miniattn {

enum class InitKind { normal, zeros, ones };

// Which part of a tensor a tensor-parallel rank holds: part `index` of `parts`
// equal parts along dimension `dim` (0: rows, 1: columns) of each of `groups`
// groups of rows (the QKV weight's q | k | v rows: 3 groups, so each rank
// holds its heads' rows of q, of k and of v; with grouped K/V heads the k and
// v groups are smaller than q's). dim -1: the whole tensor.
struct TensorShard {
  static constexpr int kMaxGroups = 3;
  int dim = -1;
  index_t groups = 1, parts = 1, index = 0;
  index_t rows = 1, cols = 1;  // the global tensor as a matrix (a vector is [n, 1])
  index_t group_rows[kMaxGroups] = {1, 0, 0};  // global rows of each group (dim 0), summing to rows

  index_t local_rows() const { return dim == 0 ? rows / parts : rows; }
  index_t local_cols() const { return dim == 1 ? cols / parts : cols; }
  // The first global row of group g.
  KOKKOS_INLINE_FUNCTION index_t group_begin(index_t g) const {
    index_t begin = 0;
    for (index_t i = 0; i < g; ++i) begin += group_rows[i];
    return begin;
  }
  // The global row-major index of local element e (row-major over the local shape).
  KOKKOS_INLINE_FUNCTION index_t global_element(index_t e) const {
    if (dim == 1) {
      const index_t width = cols / parts;
      return (e / width) * cols + index * width + e % width;
    }
    if (dim == 0) {
      index_t row = e / cols, group = 0;
      while (row >= group_rows[group] / parts) row -= group_rows[group++] / parts;
      const index_t part_rows = group_rows[group] / parts;
      return (group_begin(group) + index * part_rows + row) * cols + e % cols;
    }
    return e;
  }
};

struct ParameterInfo {
  std::string name;
  bool held = true;        // on this rank's pipeline stage; else local_size is 0
  bool tied_copy = false;  // the last stage's wte: a copy of the first stage's (not written, not in the norm)
  std::vector<index_t> global_shape;  // as in the HDF5 file / state_dict
  TensorShard tensor_shard;           // this rank's part over tensor parallelism
  bool sharded = false;               // wpe: this rank holds rows of its positions only
  index_t offset = 0;                 // into its flat buffer
  index_t local_size = 0;             // elements held on this rank
  InitKind init = InitKind::normal;
  double init_std = 0.0;
  bool weight_decay = false;  // AdamW decays matrices only, never biases or LayerNorm
};

// Offsets of one block's tensors inside the replicated buffer.
struct BlockOffsets {
  index_t ln1_weight, ln1_bias, qkv_weight, qkv_bias, proj_weight, proj_bias;
  index_t ln2_weight, ln2_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias;
};

// The layers [first, end) of a pipeline stage: contiguous, as even as the
// count allows, the first (layers % stages) stages holding one more (the last
// stage also runs the head).
struct StageLayers {
  index_t first = 0, end = 0;
  index_t count() const { return end - first; }
};
StageLayers stage_layers(index_t layers, int stages, int stage);

// Model chunk `chunk` of stage `stage` under the interleaved schedule with
// `chunks` chunks a stage: the model's chunk chunk x stages + stage of
// stages x chunks (stage_layers of them; with one chunk, the stage's layers).
StageLayers chunk_layers(index_t layers, int stages, int chunks, int stage, int chunk);

class ParameterLayout {
 public:
  // local_positions: number of sequence positions (wpe rows) this rank owns;
  // tp_size, tp_rank: the tensor-parallel group and this rank's index in it;
  // pp_size, pp_rank: the pipeline stages and this rank's; virtual_stages:
  // the model chunks each stage holds (parallel.virtual_stages).
  ParameterLayout(const ModelConfig& model, index_t local_positions, int tp_size = 1, int tp_rank = 0,
                  int pp_size = 1, int pp_rank = 0, int virtual_stages = 1);

  const std::vector<ParameterInfo>& parameters() const { return params_; }
  const ParameterInfo& find(const std::string& name) const;  // throws std::out_of_range
  index_t replicated_size() const { return replicated_size_; }
  // Offset of the tensor-parallel shards in the replicated buffer (see above).
  index_t tensor_parallel_begin() const { return tensor_parallel_begin_; }
  index_t sharded_size() const { return sharded_size_; }
  index_t total_global_count() const;  // parameter count of the whole model

  int virtual_stages() const { return static_cast<int>(chunks_.size()); }
  // The layers of this stage's model chunk `chunk` (0: the only one without interleaving).
  const StageLayers& chunk_layers(int chunk) const { return chunks_[static_cast<std::size_t>(chunk)]; }
  bool holds_embedding() const { return pp_rank_ == 0; }           // wte and wpe
  bool holds_head() const { return pp_rank_ == pp_size_ - 1; }     // ln_f and the tied wte
  // Elements at the start of the replicated buffer that are the tied copy of
  // wte (the last stage with pp > 1), else 0.
  index_t tied_copy_size() const { return tied_copy_size_; }

  index_t wte() const { return wte_; }
  index_t ln_f_weight() const { return ln_f_weight_; }
  index_t ln_f_bias() const { return ln_f_bias_; }
  // Block l (a layer of this rank's stage).
  const BlockOffsets& block(index_t l) const { return blocks_[static_cast<std::size_t>(l)]; }

 private:
  // Appends a parameter (offsets are assigned by place_in_buffers once all are known).
  std::size_t add(const std::string& name, std::vector<index_t> shape, InitKind init, double std, bool decay,
                  int tp_dim = -1, std::vector<index_t> tp_group_rows = {});
  void place_in_buffers();

  std::vector<ParameterInfo> params_;
  std::vector<BlockOffsets> blocks_;
  int tp_size_ = 1, tp_rank_ = 0, pp_size_ = 1, pp_rank_ = 0;
  std::vector<StageLayers> chunks_;
  index_t tied_copy_size_ = 0;
  index_t replicated_size_ = 0;
  index_t tensor_parallel_begin_ = 0;
  index_t sharded_size_ = 0;
  index_t wte_ = 0, ln_f_weight_ = 0, ln_f_bias_ = 0;
};

}  // namespace miniattn
