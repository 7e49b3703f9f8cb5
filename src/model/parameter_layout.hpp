#pragma once
// Names, shapes and places of every parameter (docs/design.md section 1), the same
// names as a PyTorch state_dict. Parameters live in two flat buffers:
//  * replicated: everything but wpe, identical on every rank; its gradient is
//    summed over all ranks in one all-reduce;
//  * sharded: the wpe rows of the positions this rank owns (sequence-split
//    embeddings); read, written and reduced by rows.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/types.hpp"

namespace miniattn {

enum class InitKind { normal, zeros, ones };

struct ParameterInfo {
  std::string name;
  std::vector<index_t> global_shape;  // as in the HDF5 file / state_dict
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

class ParameterLayout {
 public:
  // local_positions: number of sequence positions (wpe rows) this rank owns.
  ParameterLayout(const ModelConfig& model, index_t local_positions);

  const std::vector<ParameterInfo>& parameters() const { return params_; }
  const ParameterInfo& find(const std::string& name) const;  // throws std::out_of_range
  index_t replicated_size() const { return replicated_size_; }
  index_t sharded_size() const { return sharded_size_; }
  index_t total_global_count() const;  // parameter count of the whole model

  index_t wte() const { return wte_; }
  index_t ln_f_weight() const { return ln_f_weight_; }
  index_t ln_f_bias() const { return ln_f_bias_; }
  const BlockOffsets& block(index_t l) const { return blocks_[static_cast<std::size_t>(l)]; }

 private:
  index_t add(const std::string& name, std::vector<index_t> shape, InitKind init, double std, bool decay);

  std::vector<ParameterInfo> params_;
  std::vector<BlockOffsets> blocks_;
  index_t replicated_size_ = 0;
  index_t sharded_size_ = 0;
  index_t wte_ = 0, ln_f_weight_ = 0, ln_f_bias_ = 0;
};

}  // namespace miniattn
