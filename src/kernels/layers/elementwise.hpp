#pragma once
// Small elementwise helpers on whole views.
#include "core/types.hpp"

namespace miniattn::kernels {

// y += x
template <class T>
void add_inplace(const View2<T>& y, const View2<const T>& x);

// Number of NaN or infinite entries.
template <class T>
index_t count_nonfinite(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>& x);
template <class T>
index_t count_nonfinite(const View2<const T>& x);

}  // namespace miniattn::kernels
