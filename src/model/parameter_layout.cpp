#include "model/parameter_layout.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace miniattn {

namespace {
index_t product(const std::vector<index_t>& shape) {
  index_t n = 1;
  for (index_t s : shape) n *= s;
  return n;
}
}  // namespace

StageLayers stage_layers(index_t layers, int stages, int stage) {
  const index_t base = layers / stages, extra = layers % stages, s = stage;
  StageLayers l;
  l.first = s * base + std::min(s, extra);
  l.end = l.first + base + (s < extra ? 1 : 0);
  return l;
}

StageLayers chunk_layers(index_t layers, int stages, int chunks, int stage, int chunk) {
  return stage_layers(layers, stages * chunks, chunk * stages + stage);
}

std::size_t ParameterLayout::add(const std::string& name, std::vector<index_t> shape, InitKind init, double std,
                                 bool decay, int tp_dim, std::vector<index_t> tp_group_rows) {
  ParameterInfo info;
  info.name = name;
  info.global_shape = std::move(shape);
  TensorShard& shard = info.tensor_shard;
  shard.rows = info.global_shape[0];
  shard.cols = info.global_shape.size() > 1 ? info.global_shape[1] : 1;
  if (tp_group_rows.empty()) tp_group_rows = {shard.rows};
  shard.groups = static_cast<index_t>(tp_group_rows.size());
  for (std::size_t g = 0; g < tp_group_rows.size(); ++g) shard.group_rows[g] = tp_group_rows[g];
  if (tp_dim >= 0) {
    shard.dim = tp_dim;
    shard.parts = tp_size_;
    shard.index = tp_rank_;
  }
  info.local_size = shard.local_rows() * shard.local_cols();
  info.init = init;
  info.init_std = std;
  info.weight_decay = decay;
  params_.push_back(info);
  return params_.size() - 1;
}

// The replicated buffer holds the tensors whole on every rank first, then the
// tensor-parallel shards, so that each part is reduced over its own group in
// one call. The list keeps model order (initialisation keys on it).
void ParameterLayout::place_in_buffers() {
  for (ParameterInfo& p : params_)
    if (!p.held) p.local_size = 0;
  for (const bool tensor_parallel : {false, true}) {
    if (tensor_parallel) tensor_parallel_begin_ = replicated_size_;
    for (ParameterInfo& p : params_) {
      if (!p.held || p.sharded || (p.tensor_shard.dim >= 0) != tensor_parallel) continue;
      p.offset = replicated_size_;
      replicated_size_ += p.local_size;
    }
  }
}

ParameterLayout::ParameterLayout(const ModelConfig& m, index_t local_positions, int tp_size, int tp_rank,
                                 int pp_size, int pp_rank, int virtual_stages)
    : tp_size_(tp_size), tp_rank_(tp_rank), pp_size_(pp_size), pp_rank_(pp_rank) {
  for (int chunk = 0; chunk < virtual_stages; ++chunk)
    chunks_.push_back(miniattn::chunk_layers(m.layers, pp_size, virtual_stages, pp_rank, chunk));
  const index_t D = m.d_model, F = m.ffn_width(), V = m.vocab, N = m.seq_len;
  const index_t KVD = m.kv_head_count() * m.head_dim();  // rows of k and of v in the QKV projection
  const std::vector<index_t> qkv_rows = {D, KVD, KVD};
  const index_t QKV = m.qkv_rows();
  const double std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  constexpr int rows = 0, columns = 1;  // Megatron: column-parallel layers split W's rows, row-parallel its columns

  const std::size_t wte = add("wte", {V, D}, InitKind::normal, std, true);
  params_[wte].held = holds_embedding() || holds_head();
  params_[wte].tied_copy = !holds_embedding() && holds_head();
  tied_copy_size_ = params_[wte].tied_copy ? V * D : 0;  // wte comes first in the buffer
  if (m.positions == PositionEncoding::learned) {  // rotary positions have no table
    ParameterInfo& wpe = params_[add("wpe", {N, D}, InitKind::normal, 0.01, true)];
    wpe.sharded = true;
    wpe.held = holds_embedding();
    wpe.local_size = wpe.held ? local_positions * D : 0;
    sharded_size_ = wpe.local_size;
  }

  std::vector<std::array<std::size_t, 12>> block_params;
  for (index_t l = 0; l < m.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    block_params.push_back({
        add(p + "ln1.weight", {D}, InitKind::ones, 0.0, false),
        add(p + "ln1.bias", {D}, InitKind::zeros, 0.0, false),
        add(p + "attn.qkv.weight", {QKV, D}, InitKind::normal, std, true, rows, qkv_rows),
        add(p + "attn.qkv.bias", {QKV}, InitKind::zeros, 0.0, false, rows, qkv_rows),
        add(p + "attn.proj.weight", {D, D}, InitKind::normal, residual_std, true, columns),
        add(p + "attn.proj.bias", {D}, InitKind::zeros, 0.0, false),
        add(p + "ln2.weight", {D}, InitKind::ones, 0.0, false),
        add(p + "ln2.bias", {D}, InitKind::zeros, 0.0, false),
        add(p + "ffn.fc1.weight", {F, D}, InitKind::normal, std, true, rows),
        add(p + "ffn.fc1.bias", {F}, InitKind::zeros, 0.0, false, rows),
        add(p + "ffn.fc2.weight", {D, F}, InitKind::normal, residual_std, true, columns),
        add(p + "ffn.fc2.bias", {D}, InitKind::zeros, 0.0, false),
    });
    const bool on_stage = std::any_of(chunks_.begin(), chunks_.end(),
                                      [&](const StageLayers& c) { return l >= c.first && l < c.end; });
    for (std::size_t i : block_params.back()) params_[i].held = on_stage;
  }
  const std::size_t ln_f_weight = add("ln_f.weight", {D}, InitKind::ones, 0.0, false);
  const std::size_t ln_f_bias = add("ln_f.bias", {D}, InitKind::zeros, 0.0, false);
  params_[ln_f_weight].held = params_[ln_f_bias].held = holds_head();
  place_in_buffers();

  auto offset = [&](std::size_t i) { return params_[i].offset; };
  wte_ = offset(wte);
  ln_f_weight_ = offset(ln_f_weight);
  ln_f_bias_ = offset(ln_f_bias);
  for (const auto& b : block_params) {
    blocks_.push_back(BlockOffsets{offset(b[0]), offset(b[1]), offset(b[2]), offset(b[3]), offset(b[4]),
                                   offset(b[5]), offset(b[6]), offset(b[7]), offset(b[8]), offset(b[9]),
                                   offset(b[10]), offset(b[11])});
  }
}

const ParameterInfo& ParameterLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

index_t ParameterLayout::total_global_count() const {
  index_t n = 0;
  for (const auto& p : params_) n += product(p.global_shape);
  return n;
}

}  // namespace miniattn
