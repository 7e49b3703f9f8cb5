#pragma once
// Small elementwise helpers on whole views.
#include "core/types.hpp"

namespace miniattn::kernels {

// z = x + y (z may be x or y): a residual add, and its copy of x, in one pass.
template <class T>
void add(const View2<T>& z, const View2<const T>& x, const View2<const T>& y);

// Number of NaN or infinite entries.
template <class T>
index_t count_nonfinite(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>& x);
template <class T>
index_t count_nonfinite(const View2<const T>& x);

}  // namespace miniattn::kernels
