#pragma once
// What the attention kernels share of their team machinery
// (kernels/attention/: the fused kernel, the gemm kernel, the dispatch and the
// tile choice): team and row policies, team scratch and its level, tile
// counts, and the argument checks (require: RuntimeFailure "attention: <what>";
// same_extents3/4). The fused kernel's own tile machinery is
// kernels/attention/fused/fused_tiles.hpp.
#include <algorithm>
#include <cstddef>
#include <string>

#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/base/gpu_lanes.hpp"

namespace miniattn::kernels::attention_detail {

// Dynamic: tiles differ in work (causal masks skip whole tile pairs), and no
// result depends on which thread runs which team.
using TeamPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
using TeamMember = TeamPolicy::member_type;
template <class T>
using ScratchView = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;

inline index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }
inline index_t round_up(index_t a, index_t m) { return ceil_div(a, m) * m; }
inline void require(bool condition, const char* what) {
  if (!condition) throw RuntimeFailure(std::string("attention: ") + what);
}

template <class View>
bool same_extents4(const View& a, index_t b, index_t h, index_t n, index_t d) {
  return static_cast<index_t>(a.extent(0)) == b && static_cast<index_t>(a.extent(1)) == h &&
         static_cast<index_t>(a.extent(2)) == n && static_cast<index_t>(a.extent(3)) == d;
}

template <class View>
bool same_extents3(const View& a, index_t b, index_t h, index_t n) {
  return static_cast<index_t>(a.extent(0)) == b && static_cast<index_t>(a.extent(1)) == h &&
         static_cast<index_t>(a.extent(2)) == n;
}

template <class T>
std::size_t scratch_bytes_for(index_t count) {
  return ScratchView<T>::shmem_size(static_cast<std::size_t>(count));
}

inline std::size_t level0_scratch_bytes() { return static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)); }

// Level 0 when the tiles fit it; on a host backend level 1 otherwise (the same
// memory there); on a GPU never level 1, which is global memory (see
// choose_attention_tiles in kernels/attention/attention.hpp).
inline int scratch_level_for(std::size_t scratch_bytes) {
  if (scratch_bytes <= level0_scratch_bytes()) return 0;
  if (!kHostExecution || scratch_bytes > static_cast<std::size_t>(TeamPolicy::scratch_size_max(1))) {
    throw RuntimeFailure("attention: tiles need " + std::to_string(scratch_bytes) + " bytes of team scratch, level 0 "
                         "holds " + std::to_string(level0_scratch_bytes()) + "; use smaller kernels.query_block / "
                         "kernels.key_block (0 chooses tiles that fit)");
  }
  return 1;
}

// A team policy whose scratch (at scratch_level_for) holds `scratch_bytes`.
inline TeamPolicy make_team_policy(index_t league_size, std::size_t scratch_bytes, int& scratch_level) {
  scratch_level = scratch_level_for(scratch_bytes);
  if (kHostExecution) {
    TeamPolicy policy(static_cast<int>(league_size), 1, 1);
    return policy.set_scratch_size(scratch_level, Kokkos::PerTeam(scratch_bytes));
  }
  const int vector_length = std::min(TeamPolicy::vector_length_max(), kGpuRowLanes);
  TeamPolicy policy(static_cast<int>(league_size), Kokkos::AUTO, vector_length);
  return policy.set_scratch_size(scratch_level, Kokkos::PerTeam(scratch_bytes));
}

}  // namespace miniattn::kernels::attention_detail
