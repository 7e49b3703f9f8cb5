#include "model/parameter_layout.hpp"

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

index_t ParameterLayout::add(const std::string& name, std::vector<index_t> shape, InitKind init, double std,
                             bool decay) {
  ParameterInfo info;
  info.name = name;
  info.global_shape = std::move(shape);
  info.offset = replicated_size_;
  info.local_size = product(info.global_shape);
  info.init = init;
  info.init_std = std;
  info.weight_decay = decay;
  replicated_size_ += info.local_size;
  params_.push_back(info);
  return info.offset;
}

ParameterLayout::ParameterLayout(const ModelConfig& m, index_t local_positions) {
  const index_t D = m.d_model, F = m.ffn_width(), V = m.vocab, N = m.seq_len;
  const double std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));

  wte_ = add("wte", {V, D}, InitKind::normal, std, true);

  ParameterInfo wpe;
  wpe.name = "wpe";
  wpe.global_shape = {N, D};
  wpe.sharded = true;
  wpe.offset = 0;
  wpe.local_size = local_positions * D;
  wpe.init = InitKind::normal;
  wpe.init_std = 0.01;
  wpe.weight_decay = true;
  sharded_size_ = wpe.local_size;
  params_.push_back(wpe);

  for (index_t l = 0; l < m.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    BlockOffsets b{};
    b.ln1_weight = add(p + "ln1.weight", {D}, InitKind::ones, 0.0, false);
    b.ln1_bias = add(p + "ln1.bias", {D}, InitKind::zeros, 0.0, false);
    b.qkv_weight = add(p + "attn.qkv.weight", {3 * D, D}, InitKind::normal, std, true);
    b.qkv_bias = add(p + "attn.qkv.bias", {3 * D}, InitKind::zeros, 0.0, false);
    b.proj_weight = add(p + "attn.proj.weight", {D, D}, InitKind::normal, residual_std, true);
    b.proj_bias = add(p + "attn.proj.bias", {D}, InitKind::zeros, 0.0, false);
    b.ln2_weight = add(p + "ln2.weight", {D}, InitKind::ones, 0.0, false);
    b.ln2_bias = add(p + "ln2.bias", {D}, InitKind::zeros, 0.0, false);
    b.fc1_weight = add(p + "ffn.fc1.weight", {F, D}, InitKind::normal, std, true);
    b.fc1_bias = add(p + "ffn.fc1.bias", {F}, InitKind::zeros, 0.0, false);
    b.fc2_weight = add(p + "ffn.fc2.weight", {D, F}, InitKind::normal, residual_std, true);
    b.fc2_bias = add(p + "ffn.fc2.bias", {D}, InitKind::zeros, 0.0, false);
    blocks_.push_back(b);
  }
  ln_f_weight_ = add("ln_f.weight", {D}, InitKind::ones, 0.0, false);
  ln_f_bias_ = add("ln_f.bias", {D}, InitKind::zeros, 0.0, false);
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
