#pragma once
// The rotary positions of a run (model.positions rope, kernels/layers/rotary.hpp):
// the cos/sin table of this rank's local rows, and the rotations the blocks
// apply to q and k after the QKV projection (and, transposed, to their
// gradients). Without packed documents one table serves every sample and
// slot; with them a token's position restarts at its document's start, so
// each pipeline slot keeps a table per sample, refreshed whenever the slot's
// document ids are. With learned positions it holds and does nothing.
#include <cstddef>
#include <vector>

#include "core/config.hpp"
#include "core/types.hpp"

namespace miniattn {

// What RotaryPositions allocates, for the memory plan: cos and sin tables of
// [samples, n, Dh/2] values of acc_bytes each (samples: the micro-batch with
// packed documents, else 1), one per slot with documents, else one.
std::size_t rotary_table_bytes(const ModelConfig& model, index_t local_positions, index_t micro_batch,
                               bool documents, index_t slots, std::size_t acc_bytes);

template <class T>
class RotaryPositions {
 public:
  RotaryPositions() = default;
  // positions: the global positions of the local rows [n]. With packed
  // documents (document_slots > 0) a table per slot of micro_batch samples,
  // else one table for every sample.
  RotaryPositions(const ModelConfig& model, const View1<const index_t>& positions, index_t micro_batch,
                  index_t document_slots);

  bool enabled() const { return !tables_.empty(); }
  // Recomputes slot's table from the document ids of the micro-batch it now
  // holds (packed documents; nothing to do without).
  void refresh(index_t slot, const DocumentIds& documents) const;
  // q [B, H, n, Dh] and k [B, KV, n, Dh] rotated in place (forward), or their
  // gradients rotated back (the transpose).
  void rotate(index_t slot, const View4<T>& q, const View4<T>& k) const;
  void rotate_gradients(index_t slot, const View4<T>& dq, const View4<T>& dk) const;

  std::size_t allocated_bytes() const;

 private:
  struct Table {
    View3<Acc<T>> cos, sin;
  };
  const Table& table(index_t slot) const { return tables_[tables_.size() == 1 ? 0 : static_cast<std::size_t>(slot)]; }

  double theta_ = 0.0;
  View1<const index_t> positions_;
  std::vector<Table> tables_;
};

}  // namespace miniattn
