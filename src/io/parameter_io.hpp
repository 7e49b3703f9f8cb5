#pragma once
// Parameters and verification snapshots in HDF5 (docs/design.md section 4).
// Global arrays are stored whole in global position order whatever the rank
// layout: replicated tensors are written by world rank 0, wpe rows and token
// rows by the ranks that own them (one replica), tensor-parallel shards as
// hyperslabs by the ranks of one TP group.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "io/hdf5_file.hpp"
#include "model/parameter_layout.hpp"
#include "model/parameters.hpp"

namespace miniattn::io {

// Runs of owned positions at a fixed stride, a fixed number per layout (1 for
// contiguous and striped, 2 for zigzag) so every rank makes the same
// collective calls; stride 1 but for striped (sp).
struct PositionRun {
  index_t global_begin = 0;
  index_t local_begin = 0;
  index_t count = 0;
  index_t stride = 1;
};
std::vector<PositionRun> position_runs(const std::vector<index_t>& positions, Layout layout);

// A parameter's shape as HDF5 dimensions, and the values per row (dimension 0).
std::vector<std::uint64_t> to_u64(const std::vector<index_t>& shape);
std::uint64_t row_width(const std::vector<index_t>& shape);

// One block of a parameter this rank holds: where it lies in the file and
// where in the parameter's buffer (ParameterBuffers::buffer_of).
struct LocalBlock {
  RowBlock block;
  index_t buffer_offset = 0;
};
// The blocks of p this rank holds, as many on every rank (the I/O calls are
// collective): the whole tensor; wpe: one per position run; a tensor-parallel
// shard: one per group of rows (q, k, v) or its range of columns; another
// pipeline stage's tensor: as many, of no rows.
std::vector<LocalBlock> local_blocks(const ParameterInfo& p, const std::vector<index_t>& positions, Layout layout);
// Whether this rank writes its blocks of p: exactly one replica of each block
// does, on the stage holding it (wte: the first).
bool writes_blocks_of(const ParameterInfo& p, const ProcessGrid& grid);

// Reads every parameter by name from /params of an HDF5 file (float32 or
// float64). Missing datasets and shape mismatches are InputErrors naming the
// file and dataset.
template <class T>
void load_parameters(const std::string& path, const ParameterLayout& layout, const ProcessGrid& grid,
                     const std::vector<index_t>& positions, Layout position_layout,
                     const ParameterBuffers<T>& params);

// Writes /<group>/<name> for every parameter from `values` (parameters or gradients).
template <class T>
void write_parameter_group(Hdf5File& file, const std::string& group, const ParameterLayout& layout,
                           const ProcessGrid& grid, const std::vector<index_t>& positions,
                           Layout position_layout, const ParameterBuffers<T>& values);

// The config as attributes on "/" (model sizes as integers, the rest as strings),
// plus the resolved configuration (every deck key, defaults included) as JSON
// in the string attribute "config".
void write_config_attributes(Hdf5File& file, const Config& config, int world_size);

struct SnapshotContent {
  index_t step = 0;
  double loss = 0.0;
  index_t first_sample = 0;  // global index of this rank's first sample
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> tokens;  // [local batch, N+1]
  Kokkos::View<index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> document_ids;  // [local batch, N], or empty
};

// The verification snapshot: /params, /grads, /inputs/tokens (and with packed
// documents /inputs/document_ids), /loss and the
// config attributes, written to a temporary file and renamed.
template <class T>
void write_snapshot(const std::string& path, const Config& config, const ParameterLayout& layout,
                    const ProcessGrid& grid, const std::vector<index_t>& positions, const ParameterBuffers<T>& params,
                    const ParameterBuffers<T>& grads, const SnapshotContent& content);

}  // namespace miniattn::io
