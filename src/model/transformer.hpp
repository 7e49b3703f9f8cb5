#pragma once
// The model of docs/design.md section 1 on this rank's rows (rows = local samples x
// local positions), forward and backward. All activations are allocated once,
// here, and reused every step; their size is linear in the local sequence length.
//
// With tensor parallelism (tensor_parallel.hpp) the rows are those of the TP
// group: this rank holds its chunk of them in the LayerNorm and residual
// regions (residual stream, LayerNorms, the head and the loss) and all of them
// for its H / tp heads and F / tp FFN units in between.
//
// With pipeline parallelism the model is this rank's stage: its layers, the
// embedding on the first stage, ln_f, the head and the loss on the last. The
// rows are one micro-batch's, and a number of micro-batches can be in flight
// between their forward and backward passes (the 1F1B schedule bounds them):
// each slot saves its own activations; workspaces are shared. With the
// interleaved schedule the stage holds v model chunks (ParameterLayout's
// chunk_layers); each chunk has its own slots, and a slot runs its chunk's
// layers (the embedding in chunk 0 of the first stage, the head in chunk v - 1
// of the last).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention_strategy.hpp"
#include "core/config.hpp"
#include "core/types.hpp"
#include "kernels/base/ordered_sum.hpp"
#include "kernels/layers/embedding.hpp"
#include "model/rotary_positions.hpp"
#include "model/parameter_layout.hpp"
#include "model/parameters.hpp"
#include "model/tensor_parallel.hpp"
#include "core/phase_timer.hpp"

namespace miniattn {

// What one block saves in the forward pass for its backward pass. The
// backward pass recomputes the ln1/ln2 outputs (LayerNorm again, with these
// statistics) and gelu's, and, with recomputation on (train.recompute), q, k,
// v (the QKV projection) and fc1's output (the fc1 projection): two extra
// GEMMs per block, 7-11% of a CPU step at 8K tokens, for (D + 2 KV Dh + F) / tp
// fewer values saved per row and block. The attention output and its log-sum-exp are
// kept, so attention (and its exchanges) runs once forward and once backward.
// T is the activations' storage (bf16 for bf16 runs); statistics are Acc<T>.
template <class T>
struct BlockActivations {
  View2<T> after_attention;  // [chunk rows, D] x + attention half: input of ln2 and of the FFN residual
  View1<Acc<T>> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // [chunk rows]
  View4<T> attention_out;  // [B, H / tp, n, Dh]
  View3<Acc<T>> lse;       // [B, H / tp, n]
  // The block's own, or (recomputed) views of the workspace every block shares.
  View4<T> q, k, v;  // [B, H / tp, n, Dh]; k, v: [B, KV / tp, n, Dh]; as attention reads them (rotated)
  View2<T> fc1_out;  // [rows, F / tp]
};

// What one micro-batch in flight saves on this stage, for one model chunk.
template <class T>
struct SlotActivations {
  StageLayers layers;                 // the chunk's
  bool embedding = false, head = false;  // whether the chunk starts with the embedding or ends with the head
  std::vector<View2<T>> residual;  // [i]: input of the chunk's block i; back(): the chunk's output
  std::vector<BlockActivations<T>> blocks;
};

// One micro-batch: the group's inputs and targets (all rows) and, with packed
// documents, its samples' document ids [micro_batch, N] (else empty).
struct MicroBatch {
  View1<const index_t> inputs, targets;
  DocumentIds documents;
};

// Typed views of one block's parameters or gradients (transformer.cpp).
template <class T>
struct BlockTensors;

template <class T>
class Transformer {
 public:
  // attention: one strategy per slot and layer of its chunk (each keeps what
  // its backward pass needs; slot-major) over this rank's H / tp heads.
  // chunk_slots: the slots of each model chunk of the stage (layout's
  // virtual_stages of them; one chunk without interleaving).
  // rotary: the rotations of q and k with model.positions rope (none by default).
  // recompute: whether the backward pass recomputes q, k, v and fc1's output
  // (the memory plan's choice: perf/memory_plan.hpp); the same bits either way.
  Transformer(const ModelConfig& model, const ParameterLayout& layout, index_t micro_batch, index_t local_positions,
              AttentionLayers<T> attention, const TensorParallelGroup& tp = {},
              const std::vector<index_t>& chunk_slots = {1},
              RotaryPositions<T> rotary = {}, bool recompute = true);

  // Runs the stage on one micro-batch in `slot`. On the first stage it starts from the embedding, on the
  // others from stage_input(slot), which the caller has filled. Returns, on
  // the last stage, the SUM of the cross-entropy over this rank's chunk of
  // rows (the caller sums over ranks and divides by the global token count),
  // else 0 (the output is stage_output(slot)).
  double forward(const ParameterBuffers<T>& params, index_t slot, const MicroBatch& batch);

  // Accumulates d(loss_scale * loss sum)/d(params) into grads (+=) for the
  // micro-batch in `slot`, which forward() ran on `batch`. On the last stage it starts
  // from the loss, on the others from residual_gradient(), which the caller
  // has filled with the gradient of stage_output(slot); on return
  // residual_gradient() holds the gradient of stage_input(slot). params are
  // the weights the model computes with (T: bf16 for bf16 runs), grads are
  // Param<T> (fp32 for bf16).
  void backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads, index_t slot,
                const MicroBatch& batch, Acc<T> loss_scale);

  index_t rows() const { return rows_; }
  index_t chunk_rows() const { return chunk_rows_; }
  index_t slots() const { return static_cast<index_t>(slots_.size()); }
  // The slot of micro-batch `micro_batch` on model chunk `chunk` (its micro-batches take the chunk's slots in turn).
  index_t slot_of(index_t chunk, index_t micro_batch) const {
    const std::size_t c = static_cast<std::size_t>(chunk);
    return first_slot_[c] + micro_batch % (first_slot_[c + 1] - first_slot_[c]);
  }
  // [chunk rows, D]: what enters and leaves the stage, and their gradient (one buffer).
  View2<T> stage_input(index_t slot) const { return slots_[static_cast<std::size_t>(slot)].residual.front(); }
  View2<T> stage_output(index_t slot) const { return slots_[static_cast<std::size_t>(slot)].residual.back(); }
  View2<T> residual_gradient() const { return d_residual_; }

  // After forward(): the position, in forward order, of the first activation
  // of this stage holding a NaN or Inf in any slot (0 embedding, 1 + l block l,
  // layers + 1 logits), or -1 when all are finite. An ordinal, so ranks can
  // agree on the earliest.
  index_t first_nonfinite_stage() const;
  std::string stage_name(index_t stage) const;

  // With a timer, each layer's attention is timed as the phases
  // "attention_forward" / "attention_backward" (fenced: for bench runs).
  void set_timer(PhaseTimer* timer) { timer_ = timer; }

  // Bytes of all Views this object allocated (activations, workspaces, attention strategies).
  std::size_t allocated_bytes() const;

 private:
  // Block l (a layer of the stage) on the micro-batch in `slot`.
  void block_forward(const ParameterBuffers<T>& params, index_t slot, index_t l, const DocumentIds& documents);
  void block_backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads, index_t slot,
                      index_t l, const DocumentIds& documents);
  // The two runs the backward repeats, so each is written once and the
  // recompute matches the forward bitwise: ln1(x_in) gathered in all_rows_,
  // and with `project` a.q, a.k, a.v from it (the QKV projection, heads,
  // rotary positions); ln2(a.after_attention) gathered in all_rows_, with
  // `project` a.fc1_out from it, and gelu(a.fc1_out) in d_hidden_.
  void attention_inputs(const BlockTensors<T>& w, index_t slot, const View2<T>& x_in, BlockActivations<T>& a,
                        bool project);
  void ffn_hidden(const BlockTensors<T>& w, BlockActivations<T>& a, bool project);
  void head_backward(const ParameterBuffers<T>& params, const ParameterBuffers<Param<T>>& grads, const View2<T>& x,
                     const View1<const index_t>& targets, Acc<T> loss_scale);
  AttentionStrategy<T>& attention(index_t slot, index_t l) {
    const StageLayers& layers = slots_[static_cast<std::size_t>(slot)].layers;  // every chunk's count is the same
    return *attention_.layers[static_cast<std::size_t>(slot * layers.count() + l - layers.first)];
  }
  // A View of these extents, its bytes counted in allocated_bytes() (so that
  // the count is what was allocated, not a second list of the Views).
  template <class V, class... Extents>
  V allocate(const std::string& name, Extents... extents) {
    V view(name, static_cast<std::size_t>(extents)...);
    view_bytes_ += view.span() * sizeof(typename V::value_type);
    return view;
  }
  // [R, D / tp] over the first R x D / tp values of `memory`: merged heads or their gradient.
  View2<T> merged_rows(const View2<T>& memory) const;
  // This rank's chunk of the group's inputs or targets.
  View1<const index_t> chunk_of(const View1<const index_t>& all_rows) const;

  ModelConfig model_;
  PhaseTimer* timer_ = nullptr;
  std::size_t view_bytes_ = 0;  // of the Views allocate() made
  const ParameterLayout& layout_;
  std::vector<index_t> first_slot_;  // [chunk]: the chunk's first slot; back(): slots()
  TensorParallelGroup tp_;
  index_t local_batch_, local_positions_, rows_, chunk_rows_, first_row_;
  index_t d_shard_, kv_shard_, ffn_shard_;  // this rank's D / tp attention columns, KV Dh / tp K (and V)
                                            // columns and F / tp FFN units
  index_t qkv_rows() const { return d_shard_ + 2 * kv_shard_; }
  AttentionLayers<T> attention_;
  RotaryPositions<T> rotary_;

  View1<index_t> wpe_row_;  // local wpe row of each local position (identity)
  std::vector<SlotActivations<T>> slots_;
  // The head's forward state, kept for one micro-batch (not per slot): the
  // schedules run the last chunk's backward right after its forward.
  View2<T> logits_;  // [r, V] on the last stage, else empty
  View1<Acc<T>> final_mean_, final_rstd_;
  View1<Acc<T>> logits_lse_;  // [R]: log-sum-exp of each row of logits (forward, reused by backward)
  View1<double> row_loss_;  // [R]: cross-entropy of each row, summed in a fixed order
  kernels::OrderedSum loss_sum_;
  kernels::TokenRows token_rows_;  // the micro-batch's rows of each token (the wte gradient's order)

  // Workspaces shared by all blocks, each reused in both passes (forward and
  // backward never overlap); what each holds when is spelled out in block_forward
  // and block_backward. R: all rows, r: the chunk (R with tp = 1); Ds = D / tp,
  // KVs = KV Dh / tp, Fs = F / tp.
  View2<T> qkv_;  // [R, Ds + 2 KVs]: QKV projection; its first R x Ds: merged attention output / its gradient; d_qkv
  View2<T> normed_;   // [r, D]: a LayerNorm output (ln1, ln2, ln_f) or a projection output
  View2<T> all_rows_;  // [R, D]: normed_ gathered, or a row-parallel partial output (normed_ with tp = 1)
  View2<T> d_all_rows_out_, d_all_rows_in_;  // [R, D]: d_residual_ gathered / a column-parallel partial
                                             // input gradient: one buffer (with tp = 1: d_residual_, d_normed_)
  bool recompute_;
  View1<T> arena_;  // recomputed: R x max(Ds + 2 KVs, Fs), every block's q, k, v (attention half) or fc1 output (FFN half)
  View2<T> d_residual_, d_normed_;  // [r, D]
  View2<T> d_hidden_;               // [R, Fs]; also holds gelu outputs in both passes
  View4<T> d_q_, d_k_, d_v_, d_attention_out_;
  View2<Acc<T>> column_partials_;  // [column_sum_chunks(R), max(Ds + 2 KVs, Fs, D)]: bias and LayerNorm gradient sums
};

}  // namespace miniattn
