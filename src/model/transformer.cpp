#include "model/transformer.hpp"

#include <algorithm>
#include <string>

#include "comm/exchange_watch.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/base/gemm.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/layers/cross_entropy.hpp"
#include "kernels/layers/elementwise.hpp"
#include "kernels/layers/embedding.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/head_layout.hpp"
#include "kernels/layers/layer_norm.hpp"
#include "kernels/layers/linear.hpp"

namespace miniattn {

// Typed views of one block's parameters (or gradients) inside a flat buffer:
// this rank's shards, Ds = D / tp attention columns, Qs = Ds + 2 KV Dh / tp QKV
// rows (KV = model.kv_heads) and Fs = F / tp FFN units.
template <class T>
struct BlockTensors {
  UnmanagedView1<T> ln1_weight, ln1_bias, qkv_bias, proj_bias, ln2_weight, ln2_bias, fc1_bias, fc2_bias;
  UnmanagedView2<T> qkv_weight, proj_weight, fc1_weight, fc2_weight;

  BlockTensors(const View1<T>& buf, const BlockOffsets& o, index_t D, index_t Ds, index_t Qs, index_t Fs)
      : ln1_weight(vector_at(buf, o.ln1_weight, D)), ln1_bias(vector_at(buf, o.ln1_bias, D)),
        qkv_bias(vector_at(buf, o.qkv_bias, Qs)), proj_bias(vector_at(buf, o.proj_bias, D)),
        ln2_weight(vector_at(buf, o.ln2_weight, D)), ln2_bias(vector_at(buf, o.ln2_bias, D)),
        fc1_bias(vector_at(buf, o.fc1_bias, Fs)), fc2_bias(vector_at(buf, o.fc2_bias, D)),
        qkv_weight(matrix_at(buf, o.qkv_weight, Qs, D)), proj_weight(matrix_at(buf, o.proj_weight, D, Ds)),
        fc1_weight(matrix_at(buf, o.fc1_weight, Fs, D)), fc2_weight(matrix_at(buf, o.fc2_weight, D, Fs)) {}
};

namespace {

// Attention runs as a phase of the timer (fenced, for bench runs) when there
// is one, else inside a profiling region of the same name.
template <class Run>
void attention_phase(PhaseTimer* timer, const std::string& phase, const Run& run) {
  if (timer) {
    auto timed = timer->measure(phase);
    run();
  } else {
    compat::ProfilingRegion region("miniattn::" + phase);
    run();
  }
}

// v(i) = i. A free function because CUDA forbids device lambdas in constructors.
void fill_with_index(const View1<index_t>& v) {
  Kokkos::parallel_for(
      "miniattn::Transformer::wpe_row", Kokkos::RangePolicy<ExecSpace>(0, static_cast<index_t>(v.extent(0))),
      KOKKOS_LAMBDA(const index_t i) { v(i) = i; });
}

}  // namespace

template <class T>
Transformer<T>::Transformer(const ModelConfig& model, const ParameterLayout& layout, index_t micro_batch,
                            index_t local_positions, AttentionLayers<T> attention, const TensorParallelGroup& tp,
                            const std::vector<index_t>& chunk_slots, RotaryPositions<T> rotary, bool recompute)
    : model_(model), layout_(layout), tp_(tp), local_batch_(micro_batch),
      local_positions_(local_positions), rows_(micro_batch * local_positions), chunk_rows_(tp.chunk_rows(rows_)),
      first_row_(tp.first_row(rows_)), d_shard_(model.d_model / tp.size),
      kv_shard_(model.kv_head_count() / tp.size * model.head_dim()), ffn_shard_(model.ffn_width() / tp.size),
      attention_(std::move(attention)), rotary_(std::move(rotary)), recompute_(recompute) {
  const index_t D = model.d_model, V = model.vocab, H = model.heads / tp.size, Dh = model.head_dim();
  const index_t Ds = d_shard_, Fs = ffn_shard_, KVs = kv_shard_, Qs = qkv_rows(), KV = KVs / Dh;
  const index_t B = micro_batch, n = local_positions, R = rows_, r = chunk_rows_;

  wpe_row_ = allocate<View1<index_t>>("wpe_row", n);
  fill_with_index(wpe_row_);

  const int chunks = layout.virtual_stages();
  std::vector<int> chunk_of_slot;  // the chunks' slots one after another
  first_slot_.push_back(0);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const index_t count = chunk_slots.at(static_cast<std::size_t>(chunk));
    first_slot_.push_back(first_slot_.back() + count);
    chunk_of_slot.insert(chunk_of_slot.end(), static_cast<std::size_t>(count), chunk);
  }
  for (index_t k = 0; k < first_slot_.back(); ++k) {
    SlotActivations<T> slot;
    const int chunk = chunk_of_slot[static_cast<std::size_t>(k)];
    slot.layers = layout.chunk_layers(chunk);
    slot.embedding = layout.holds_embedding() && chunk == 0;
    slot.head = layout.holds_head() && chunk == chunks - 1;
    const std::string prefix = first_slot_.back() > 1 ? "slot" + std::to_string(k) + "." : "";
    for (index_t l = slot.layers.first; l <= slot.layers.end; ++l)
      slot.residual.push_back(allocate<View2<T>>(prefix + "residual." + std::to_string(l), r, D));
    for (index_t l = slot.layers.first; l < slot.layers.end; ++l) {
      const std::string p = prefix + "blocks." + std::to_string(l) + ".";
      BlockActivations<T> a;
      a.after_attention = allocate<View2<T>>(p + "after_attention", r, D);
      a.ln1_mean = allocate<View1<Acc<T>>>(p + "ln1_mean", r);
      a.ln1_rstd = allocate<View1<Acc<T>>>(p + "ln1_rstd", r);
      a.ln2_mean = allocate<View1<Acc<T>>>(p + "ln2_mean", r);
      a.ln2_rstd = allocate<View1<Acc<T>>>(p + "ln2_rstd", r);
      a.attention_out = allocate<View4<T>>(p + "attention_out", B, H, n, Dh);
      a.lse = allocate<View3<Acc<T>>>(p + "lse", B, H, n);
      if (!recompute) {
        a.q = allocate<View4<T>>(p + "q", B, H, n, Dh);
        a.k = allocate<View4<T>>(p + "k", B, KV, n, Dh);
        a.v = allocate<View4<T>>(p + "v", B, KV, n, Dh);
        a.fc1_out = allocate<View2<T>>(p + "fc1_out", R, Fs);
      }
      slot.blocks.push_back(a);
    }
    slots_.push_back(slot);
  }
  logits_ = allocate<View2<T>>("logits", layout.holds_head() ? r : 0, V);
  final_mean_ = allocate<View1<Acc<T>>>("ln_f_mean", r);
  final_rstd_ = allocate<View1<Acc<T>>>("ln_f_rstd", r);
  logits_lse_ = allocate<View1<Acc<T>>>("logits_lse", r);
  row_loss_ = allocate<View1<double>>("row_loss", r);
  loss_sum_ = kernels::OrderedSum(r);
  token_rows_ = kernels::TokenRows(V, r);

  qkv_ = allocate<View2<T>>("qkv", R, Qs);
  normed_ = allocate<View2<T>>("normed", r, D);  // r x D = R x Ds: also the merged heads in the backward pass
  d_residual_ = allocate<View2<T>>("d_residual", r, D);
  d_normed_ = allocate<View2<T>>("d_normed", r, D);
  // Separate only where a rank holds a chunk of the rows (TP with sequence parallelism).
  all_rows_ = tp.splits_rows() ? allocate<View2<T>>("all_rows", R, D) : normed_;
  d_all_rows_out_ = tp.splits_rows() ? allocate<View2<T>>("d_all_rows", R, D) : d_residual_;
  d_all_rows_in_ = tp.splits_rows() ? d_all_rows_out_ : d_normed_;
  arena_ = allocate<View1<T>>("block_arena", recompute ? R * std::max(Qs, Fs) : 0);
  for (SlotActivations<T>& slot : slots_)
    for (BlockActivations<T>& a : slot.blocks)
      if (recompute) {
        a.q = View4<T>(arena_.data(), B, H, n, Dh);
        a.k = View4<T>(arena_.data() + R * Ds, B, KV, n, Dh);
        a.v = View4<T>(arena_.data() + R * (Ds + KVs), B, KV, n, Dh);
        a.fc1_out = View2<T>(arena_.data(), R, Fs);
      }
  d_hidden_ = allocate<View2<T>>("d_hidden", R, Fs);
  d_q_ = allocate<View4<T>>("d_q", B, H, n, Dh);
  d_k_ = allocate<View4<T>>("d_k", B, KV, n, Dh);
  d_v_ = allocate<View4<T>>("d_v", B, KV, n, Dh);
  d_attention_out_ = allocate<View4<T>>("d_attention_out", B, H, n, Dh);
  column_partials_ = allocate<View2<Acc<T>>>("column_partials", kernels::column_sum_chunks(R), std::max({Qs, Fs, D}));
}

template <class T>
View2<T> Transformer<T>::merged_rows(const View2<T>& memory) const {
  return View2<T>(memory.data(), rows_, d_shard_);
}

template <class T>
View1<const index_t> Transformer<T>::chunk_of(const View1<const index_t>& all_rows) const {
  return Kokkos::subview(all_rows, Kokkos::make_pair(first_row_, first_row_ + chunk_rows_));
}

template <class T>
void Transformer<T>::attention_inputs(const BlockTensors<T>& w, index_t slot, const View2<T>& x_in,
                                      BlockActivations<T>& a, bool project) {
  kernels::layer_norm_forward<T>(x_in, w.ln1_weight, w.ln1_bias, normed_, a.ln1_mean, a.ln1_rstd);
  tp_.gather_rows(normed_, all_rows_);
  if (!project) return;
  kernels::linear_forward<T>(all_rows_, w.qkv_weight, w.qkv_bias, qkv_);
  kernels::split_qkv_heads<T>(qkv_, a.q, a.k, a.v);
  rotary_.rotate(slot, a.q, a.k);
}

template <class T>
void Transformer<T>::ffn_hidden(const BlockTensors<T>& w, BlockActivations<T>& a, bool project) {
  kernels::layer_norm_forward<T>(a.after_attention, w.ln2_weight, w.ln2_bias, normed_, a.ln2_mean, a.ln2_rstd);
  tp_.gather_rows(normed_, all_rows_);
  if (project) kernels::linear_forward<T>(all_rows_, w.fc1_weight, w.fc1_bias, a.fc1_out);
  kernels::gelu_forward<T>(a.fc1_out, d_hidden_);
}

template <class T>
void Transformer<T>::block_forward(const ParameterBuffers<T>& params, index_t slot, index_t l,
                                   const DocumentIds& documents) {
  const BlockTensors<T> w(params.replicated, layout_.block(l), model_.d_model, d_shard_, qkv_rows(), ffn_shard_);
  SlotActivations<T>& saved = slots_[static_cast<std::size_t>(slot)];
  const std::size_t i = static_cast<std::size_t>(l - saved.layers.first);
  BlockActivations<T>& a = saved.blocks[i];
  const View2<T>& x_in = saved.residual[i];
  const View2<T>& x_out = saved.residual[i + 1];

  attention_inputs(w, slot, x_in, a, /*project=*/true);
  AttentionStrategy<T>& attention = this->attention(slot, l);
  attention_phase(timer_, "attention_forward",
                  [&] { attention.forward(a.q, a.k, a.v, documents, a.attention_out, a.lse); });
  const View2<T> merged = merged_rows(qkv_);  // qkv_ is consumed: its rows hold the merged heads
  kernels::merge_heads<T>(a.attention_out, merged);
  kernels::linear_forward<T>(merged, w.proj_weight, tp_.on_first_rank(w.proj_bias), all_rows_);
  tp_.reduce_scatter_rows(all_rows_, normed_);
  kernels::add<T>(a.after_attention, x_in, normed_);

  ffn_hidden(w, a, /*project=*/true);  // gelu(fc1 out) in d_hidden_, a workspace: backward recomputes it
  kernels::linear_forward<T>(d_hidden_, w.fc2_weight, tp_.on_first_rank(w.fc2_bias), all_rows_);
  tp_.reduce_scatter_rows(all_rows_, normed_);
  kernels::add<T>(x_out, a.after_attention, normed_);
}

template <class T>
double Transformer<T>::forward(const ParameterBuffers<T>& params, index_t slot, const MicroBatch& batch) {
  compat::ProfilingRegion region("miniattn::forward");
  const index_t D = model_.d_model, V = model_.vocab;
  const auto wte = matrix_at(params.replicated, layout_.wte(), V, D);
  const SlotActivations<T>& saved = slots_[static_cast<std::size_t>(slot)];
  rotary_.refresh(slot, batch.documents);
  if (saved.embedding) {
    const auto wpe = matrix_at(params.sharded, 0, layout_.sharded_size() > 0 ? local_positions_ : 0, D);
    kernels::embedding_forward<T>(chunk_of(batch.inputs), wpe_row_, wte, wpe, saved.residual.front(), first_row_);
  }
  for (index_t l = saved.layers.first; l < saved.layers.end; ++l) {
    set_exchange_layer(l);
    block_forward(params, slot, l, batch.documents);
  }
  set_exchange_layer(-1);
  if (!saved.head) return 0.0;
  kernels::layer_norm_forward<T>(saved.residual.back(), vector_at(params.replicated, layout_.ln_f_weight(), D),
                                 vector_at(params.replicated, layout_.ln_f_bias(), D), normed_, final_mean_,
                                 final_rstd_);
  kernels::linear_forward<T>(normed_, wte, View1<const T>(), logits_);
  kernels::cross_entropy_forward<T>(logits_, chunk_of(batch.targets), logits_lse_, row_loss_);
  return loss_sum_.sum<double>(row_loss_);
}

template <class T>
void Transformer<T>::block_backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads,
                                    index_t slot, index_t l, const DocumentIds& documents) {
  // On entry d_residual_ holds dL/d(block output); on exit dL/d(block input).
  const index_t D = model_.d_model;
  const BlockTensors<T> w(params.replicated, layout_.block(l), D, d_shard_, qkv_rows(), ffn_shard_);
  const BlockTensors<Param<T>> g(grads.replicated, layout_.block(l), D, d_shard_, qkv_rows(), ffn_shard_);
  SlotActivations<T>& saved = slots_[static_cast<std::size_t>(slot)];
  const std::size_t i = static_cast<std::size_t>(l - saved.layers.first);
  BlockActivations<T>& a = saved.blocks[i];
  const View2<T>& x_in = saved.residual[i];

  // Feed-forward half: out = after_attention + fc2(gelu(fc1(ln2(after_attention)))).
  // ln2's output (normed_, gathered into all_rows_) and, unless kept, fc1's
  // output are recomputed, bitwise as in the forward pass; gelu(fc1_out) goes
  // into d_hidden_ for dW2, then d_hidden_ becomes dL/d(gelu out).
  ffn_hidden(w, a, recompute_);
  tp_.gather_rows(d_residual_, d_all_rows_out_);
  kernels::linear_backward<T>(d_all_rows_out_, d_hidden_, w.fc2_weight, View2<T>(), g.fc2_weight,
                              tp_.bias_gradient(g.fc2_bias), column_partials_);
  kernels::gemm<T>('N', 'N', Acc<T>(1), d_all_rows_out_, w.fc2_weight, Acc<T>(0), d_hidden_);
  kernels::gelu_backward<T>(a.fc1_out, d_hidden_, d_hidden_);
  kernels::linear_backward<T>(d_hidden_, all_rows_, w.fc1_weight, d_all_rows_in_, g.fc1_weight, g.fc1_bias,
                              column_partials_);
  tp_.reduce_scatter_rows(d_all_rows_in_, d_normed_);
  kernels::layer_norm_backward<T>(d_normed_, a.after_attention, w.ln2_weight, a.ln2_mean, a.ln2_rstd, d_residual_,
                                  g.ln2_weight, g.ln2_bias, column_partials_);

  // Attention half: after_attention = x_in + proj(attention(qkv(ln1(x_in)))).
  // The merged attention output goes into normed_'s memory (free; r x D =
  // R x Ds values), its gradient into qkv_'s first rows (free until q, k, v
  // are recomputed through it).
  const View2<T> merged = merged_rows(normed_), d_merged = merged_rows(qkv_);
  kernels::merge_heads<T>(a.attention_out, merged);
  tp_.gather_rows(d_residual_, d_all_rows_out_);
  kernels::linear_backward<T>(d_all_rows_out_, merged, w.proj_weight, d_merged, g.proj_weight,
                              tp_.bias_gradient(g.proj_bias), column_partials_);
  kernels::split_heads<T>(d_merged, d_attention_out_);
  attention_inputs(w, slot, x_in, a, recompute_);
  AttentionStrategy<T>& attention = this->attention(slot, l);
  attention_phase(timer_, "attention_backward", [&] {
    attention.backward(a.q, a.k, a.v, documents, a.attention_out, a.lse, d_attention_out_, d_q_, d_k_, d_v_);
  });
  rotary_.rotate_gradients(slot, d_q_, d_k_);
  const View2<T>& d_qkv = qkv_;  // q, k, v live in the arena or the block
  kernels::merge_qkv_heads<T>(d_q_, d_k_, d_v_, d_qkv);
  kernels::linear_backward<T>(d_qkv, all_rows_, w.qkv_weight, d_all_rows_in_, g.qkv_weight, g.qkv_bias,
                              column_partials_);
  tp_.reduce_scatter_rows(d_all_rows_in_, d_normed_);
  kernels::layer_norm_backward<T>(d_normed_, x_in, w.ln1_weight, a.ln1_mean, a.ln1_rstd, d_residual_, g.ln1_weight,
                                  g.ln1_bias, column_partials_);
}

// Head: logits = ln_f(x) wte^T, tied with the token embedding; leaves
// dL/dx in d_residual_. ln_f's output is recomputed into normed_ (bitwise as
// in forward).
template <class T>
void Transformer<T>::head_backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads,
                                   const View2<T>& x, const View1<const index_t>& targets, Acc<T> loss_scale) {
  const index_t D = model_.d_model, V = model_.vocab;
  const auto wte = matrix_at(params.replicated, layout_.wte(), V, D);
  const auto d_wte = matrix_at(grads.replicated, layout_.wte(), V, D);
  const auto ln_f_weight = vector_at(params.replicated, layout_.ln_f_weight(), D);
  const auto ln_f_bias = vector_at(params.replicated, layout_.ln_f_bias(), D);
  kernels::layer_norm_forward<T>(x, ln_f_weight, ln_f_bias, normed_, final_mean_, final_rstd_);
  kernels::cross_entropy_backward<T>(logits_, chunk_of(targets), logits_lse_, loss_scale, logits_);
  kernels::linear_backward<T>(logits_, normed_, wte, d_normed_, d_wte, View1<Param<T>>(), column_partials_);
  Kokkos::deep_copy(d_residual_, T(0.0f));
  kernels::layer_norm_backward<T>(d_normed_, x, ln_f_weight, final_mean_, final_rstd_, d_residual_,
                                  vector_at(grads.replicated, layout_.ln_f_weight(), D),
                                  vector_at(grads.replicated, layout_.ln_f_bias(), D), column_partials_);
}

template <class T>
void Transformer<T>::backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads,
                              index_t slot, const MicroBatch& batch, Acc<T> loss_scale) {
  compat::ProfilingRegion region("miniattn::backward");
  const SlotActivations<T>& saved = slots_[static_cast<std::size_t>(slot)];
  if (saved.head) head_backward(params, grads, saved.residual.back(), batch.targets, loss_scale);
  for (index_t l = saved.layers.end - 1; l >= saved.layers.first; --l) {
    set_exchange_layer(l);
    block_backward(params, grads, slot, l, batch.documents);
  }
  set_exchange_layer(-1);
  if (!saved.embedding) return;
  const index_t D = model_.d_model, V = model_.vocab;
  kernels::group_rows_by_token(chunk_of(batch.inputs), token_rows_);
  kernels::embedding_backward<T>(d_residual_, token_rows_, wpe_row_, matrix_at(grads.replicated, layout_.wte(), V, D),
                                 matrix_at(grads.sharded, 0, layout_.sharded_size() > 0 ? local_positions_ : 0, D),
                                 first_row_);
}

template <class T>
index_t Transformer<T>::first_nonfinite_stage() const {
  // A chunk's input is the previous chunk's output: only the model's first chunk checks its input, the embedding.
  index_t earliest = -1;
  const auto found = [&](index_t stage) { earliest = earliest < 0 ? stage : std::min(earliest, stage); };
  for (const SlotActivations<T>& saved : slots_)
    for (std::size_t i = saved.embedding ? 0 : 1; i < saved.residual.size(); ++i)
      if (kernels::count_nonfinite<T>(saved.residual[i]) > 0) {
        found(saved.layers.first + static_cast<index_t>(i));
        break;
      }
  if (layout_.holds_head() && earliest < 0 && kernels::count_nonfinite<T>(logits_) > 0) found(model_.layers + 1);
  return earliest;
}

template <class T>
std::string Transformer<T>::stage_name(index_t stage) const {
  if (stage == 0) return "embedding";
  if (stage <= model_.layers) return "blocks." + std::to_string(stage - 1);
  return "logits";
}

template <class T>
std::size_t Transformer<T>::allocated_bytes() const {
  std::size_t bytes = view_bytes_ + loss_sum_.allocated_bytes() + token_rows_.allocated_bytes();
  bytes += attention_.shared_workspace_bytes;
  for (const auto& strategy : attention_.layers) bytes += strategy->allocated_bytes();
  return bytes + rotary_.allocated_bytes();
}

template class Transformer<float>;
template class Transformer<double>;
template class Transformer<bf16>;

}  // namespace miniattn
