#pragma once
// Parameter (and gradient, and optimizer-moment) storage: the two flat buffers
// of a ParameterLayout, plus typed views onto single tensors.
#include <string>

#include "core/types.hpp"
#include "model/parameter_layout.hpp"

namespace miniattn {

template <class T>
struct ParameterBuffers {
  View1<T> replicated;
  View1<T> sharded;

  ParameterBuffers() = default;
  ParameterBuffers(const ParameterLayout& layout, const std::string& label)
      : replicated(label + ".replicated", layout.replicated_size()),
        sharded(label + ".sharded", layout.sharded_size()) {}

  void fill(T value) const {
    Kokkos::deep_copy(replicated, value);
    Kokkos::deep_copy(sharded, value);
  }
  // The buffer and offset holding a parameter's local elements.
  const View1<T>& buffer_of(const ParameterInfo& p) const { return p.sharded ? sharded : replicated; }
};

template <class T>
UnmanagedView2<T> matrix_at(const View1<T>& buffer, index_t offset, index_t rows, index_t cols) {
  return UnmanagedView2<T>(buffer.data() + offset, rows, cols);
}
template <class T>
UnmanagedView1<T> vector_at(const View1<T>& buffer, index_t offset, index_t n) {
  return UnmanagedView1<T>(buffer.data() + offset, n);
}

// Deterministic initialisation of docs/design.md section 1: each element's value is
// a function of (seed, parameter, global element index) only, so every rank
// count produces the same model. positions: global positions of local wpe rows.
template <class T>
void initialize_parameters(const ParameterLayout& layout, std::uint64_t seed, const View1<const index_t>& positions,
                           index_t d_model, const ParameterBuffers<T>& params);

}  // namespace miniattn
