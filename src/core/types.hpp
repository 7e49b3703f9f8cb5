#pragma once
// View types used across the mini-app. All dense arrays are LayoutRight
// (row-major, like PyTorch and HDF5) so that KokkosBlas::gemm reaches the
// vendor BLAS and HDF5 hyperslabs map onto memory directly.
#include <Kokkos_Core.hpp>

#include "core/bf16.hpp"
#include "core/index.hpp"

#include <cstdint>
#include <type_traits>

namespace miniattn {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

// Whether kernels run on the host. Host backends run one thread per team (the
// league is the parallel loop) and leave vectorisation to the compiler; GPU
// backends use vector lanes.
constexpr bool kHostExecution = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

template <class T>
using View1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;
template <class T>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace>;
template <class T>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, MemSpace>;

// Each position's document [samples, N] with packed documents (a query sees
// only keys of its own document), else an empty View.
using DocumentIds = View2<const index_t>;

// Non-owning 2D view onto part of a flat buffer (parameters, gradients).
template <class T>
using UnmanagedView2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using UnmanagedView1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace miniattn
