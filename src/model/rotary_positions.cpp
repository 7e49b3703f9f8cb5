#include "model/rotary_positions.hpp"

#include <string>

#include "kernels/layers/rotary.hpp"

namespace miniattn {

template <class T>
RotaryPositions<T>::RotaryPositions(const ModelConfig& model, const View1<const index_t>& positions,
                                    index_t micro_batch, index_t document_slots)
    : theta_(model.rope_theta), positions_(positions) {
  if (model.positions != PositionEncoding::rope) return;
  const index_t n = positions.extent(0), half = model.head_dim() / 2;
  if (document_slots == 0) {
    const Table t{View3<Acc<T>>("rotary.cos", 1, n, half), View3<Acc<T>>("rotary.sin", 1, n, half)};
    kernels::rotary_table<Acc<T>>(positions_, DocumentIds(), theta_, t.cos, t.sin);  // positions are global
    tables_.push_back(t);
    return;
  }
  for (index_t slot = 0; slot < document_slots; ++slot) {
    const std::string name = "rotary.slot" + std::to_string(slot);
    tables_.push_back(
        {View3<Acc<T>>(name + ".cos", micro_batch, n, half), View3<Acc<T>>(name + ".sin", micro_batch, n, half)});
  }
}

template <class T>
void RotaryPositions<T>::refresh(index_t slot, const DocumentIds& documents) const {
  if (!enabled() || documents.extent(0) == 0) return;
  const Table& t = table(slot);
  kernels::rotary_table<Acc<T>>(positions_, documents, theta_, t.cos, t.sin);
}

template <class T>
void RotaryPositions<T>::rotate(index_t slot, const View4<T>& q, const View4<T>& k) const {
  if (!enabled()) return;
  const Table& t = table(slot);
  kernels::rotate<T>(q, t.cos, t.sin, false);
  kernels::rotate<T>(k, t.cos, t.sin, false);
}

template <class T>
void RotaryPositions<T>::rotate_gradients(index_t slot, const View4<T>& dq, const View4<T>& dk) const {
  if (!enabled()) return;
  const Table& t = table(slot);
  kernels::rotate<T>(dq, t.cos, t.sin, true);
  kernels::rotate<T>(dk, t.cos, t.sin, true);
}

template <class T>
std::size_t RotaryPositions<T>::allocated_bytes() const {
  std::size_t bytes = 0;
  for (const Table& t : tables_) bytes += (t.cos.span() + t.sin.span()) * sizeof(Acc<T>);
  return bytes;
}

std::size_t rotary_table_bytes(const ModelConfig& model, index_t local_positions, index_t micro_batch,
                               bool documents, index_t slots, std::size_t acc_bytes) {
  if (model.positions != PositionEncoding::rope) return 0;
  const auto table = static_cast<std::size_t>((documents ? micro_batch : 1) * local_positions * (model.head_dim() / 2));
  return (documents ? static_cast<std::size_t>(slots) : 1) * 2 * table * acc_bytes;
}

template class RotaryPositions<float>;
template class RotaryPositions<double>;
template class RotaryPositions<bf16>;

}  // namespace miniattn
