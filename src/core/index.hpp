#pragma once
// The index type of every extent and position, on its own so that code built
// without Kokkos (the cuDNN graphs, the block planner) names the same type.
#include <cstdint>

namespace miniattn {

using index_t = std::int64_t;

}  // namespace miniattn
