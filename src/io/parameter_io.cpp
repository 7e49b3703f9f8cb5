#include "io/parameter_io.hpp"

#include "core/config_json.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn::io {

std::vector<std::uint64_t> to_u64(const std::vector<index_t>& shape) {
  return std::vector<std::uint64_t>(shape.begin(), shape.end());
}

std::uint64_t row_width(const std::vector<index_t>& shape) {
  std::uint64_t w = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) w *= static_cast<std::uint64_t>(shape[i]);
  return w;
}

std::vector<PositionRun> position_runs(const std::vector<index_t>& positions, Layout layout) {
  const std::size_t runs = layout == Layout::zigzag ? 2 : 1;
  const index_t per_run = static_cast<index_t>(positions.size() / runs);
  std::vector<PositionRun> result;
  for (std::size_t r = 0; r < runs; ++r) {
    PositionRun run;
    run.local_begin = static_cast<index_t>(r) * per_run;
    run.global_begin = positions.empty() ? 0 : positions[static_cast<std::size_t>(run.local_begin)];
    run.count = per_run;
    if (layout == Layout::striped && positions.size() > 1) run.stride = positions[1] - positions[0];
    result.push_back(run);
  }
  return result;
}

std::vector<LocalBlock> local_blocks(const ParameterInfo& p, const std::vector<index_t>& positions,
                                     Layout layout) {
  std::vector<LocalBlock> blocks;
  LocalBlock whole;
  whole.block.global_shape = to_u64(p.global_shape);
  whole.block.row_count = whole.block.global_shape[0];
  whole.buffer_offset = p.offset;
  const TensorShard& shard = p.tensor_shard;
  if (p.sharded) {
    const index_t width = static_cast<index_t>(row_width(p.global_shape));
    for (const PositionRun& run : position_runs(positions, layout)) {
      LocalBlock b = whole;
      b.block.row_begin = static_cast<std::uint64_t>(run.global_begin);
      b.block.row_count = static_cast<std::uint64_t>(run.count);
      b.block.row_stride = static_cast<std::uint64_t>(run.stride);
      b.buffer_offset = p.offset + run.local_begin * width;
      blocks.push_back(b);
    }
  } else if (shard.dim == 0) {
    index_t local_row = 0;
    for (index_t g = 0; g < shard.groups; ++g) {
      const index_t part_rows = shard.group_rows[g] / shard.parts;
      LocalBlock b = whole;
      b.block.row_begin = static_cast<std::uint64_t>(shard.group_begin(g) + shard.index * part_rows);
      b.block.row_count = static_cast<std::uint64_t>(part_rows);
      b.buffer_offset = p.offset + local_row * shard.cols;
      blocks.push_back(b);
      local_row += part_rows;
    }
  } else if (shard.dim == 1) {
    LocalBlock b = whole;
    b.block.col_begin = static_cast<std::uint64_t>(shard.index * shard.local_cols());
    b.block.col_count = static_cast<std::uint64_t>(shard.local_cols());
    blocks.push_back(b);
  } else {
    blocks.push_back(whole);
  }
  if (!p.held)  // another pipeline stage's tensor: as many calls, no rows
    for (LocalBlock& b : blocks) b.block.row_count = 0;
  return blocks;
}

bool writes_blocks_of(const ParameterInfo& p, const ProcessGrid& grid) {
  if (!p.held || p.tied_copy) return false;  // the stage holding it (wte: the first) writes it
  if (p.sharded) return grid.dp_rank == 0 && grid.tp_rank == 0;  // one replica of the positions
  if (p.tensor_shard.dim >= 0) return grid.dp_rank == 0 && grid.sp_rank == 0;  // one TP group
  return grid.dp_rank == 0 && grid.sp_rank == 0 && grid.tp_rank == 0;
}

template <class T>
void load_parameters(const std::string& path, const ParameterLayout& layout, const ProcessGrid& grid,
                     const std::vector<index_t>& positions, Layout position_layout,
                     const ParameterBuffers<T>& params) {
  Hdf5File file = Hdf5File::open_read(path, grid.world);
  auto replicated = Kokkos::create_mirror_view(params.replicated);
  auto sharded = Kokkos::create_mirror_view(params.sharded);
  for (const ParameterInfo& p : layout.parameters()) {
    T* buffer = p.sharded ? sharded.data() : replicated.data();
    for (const LocalBlock& b : local_blocks(p, positions, position_layout))
      file.read("/params/" + p.name, dtype_of<T>(), b.block, buffer + b.buffer_offset);
  }
  Kokkos::deep_copy(params.replicated, replicated);
  Kokkos::deep_copy(params.sharded, sharded);
}

template <class T>
void write_parameter_group(Hdf5File& file, const std::string& group, const ParameterLayout& layout,
                           const ProcessGrid& grid, const std::vector<index_t>& positions,
                           Layout position_layout, const ParameterBuffers<T>& values) {
  compat::fence("miniattn::write_parameter_group");
  auto replicated = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), values.replicated);
  auto sharded = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), values.sharded);
  for (const ParameterInfo& p : layout.parameters()) {
    const T* buffer = p.sharded ? sharded.data() : replicated.data();
    const bool writer = writes_blocks_of(p, grid);
    for (LocalBlock b : local_blocks(p, positions, position_layout)) {
      if (!writer) b.block.row_count = 0;
      file.write(group + "/" + p.name, dtype_of<T>(), b.block, buffer + b.buffer_offset);
    }
  }
}

void write_config_attributes(Hdf5File& file, const Config& c, int world_size) {
  const auto& m = c.model;
  file.set_attribute("/", "vocab", m.vocab);
  file.set_attribute("/", "d_model", m.d_model);
  file.set_attribute("/", "heads", m.heads);
  file.set_attribute("/", "ffn", m.ffn_width());
  file.set_attribute("/", "layers", m.layers);
  file.set_attribute("/", "seq_len", m.seq_len);
  file.set_attribute("/", "batch", m.batch);
  file.set_attribute("/", "causal", static_cast<std::int64_t>(m.causal ? 1 : 0));
  file.set_attribute("/", "window", m.window);
  file.set_attribute("/", "kv_heads", m.kv_head_count());
  file.set_attribute("/", "documents", static_cast<std::int64_t>(c.data.documents ? 1 : 0));
  file.set_attribute("/", "precision", std::string(to_string(m.precision)));
  file.set_attribute("/", "positions", std::string(to_string(m.positions)));
  file.set_attribute("/", "rope_theta", m.rope_theta);
  file.set_attribute("/", "seed", static_cast<std::int64_t>(c.train.seed));
  file.set_attribute("/", "strategy", std::string(to_string(c.parallel.strategy)));
  file.set_attribute("/", "layout", std::string(to_string(c.parallel.layout)));
  file.set_attribute("/", "dp", c.parallel.dp);
  file.set_attribute("/", "tp", c.parallel.tp);
  file.set_attribute("/", "pp", c.parallel.pp);
  file.set_attribute("/", "ranks", static_cast<std::int64_t>(world_size));
  file.set_attribute("/", "config", config_to_json(c).dump());
}

template <class T>
void write_snapshot(const std::string& path, const Config& config, const ParameterLayout& layout,
                    const ProcessGrid& grid, const std::vector<index_t>& positions, const ParameterBuffers<T>& params,
                    const ParameterBuffers<T>& grads, const SnapshotContent& content) {
  Hdf5File file = Hdf5File::create(path, grid.world);
  write_config_attributes(file, config, grid.world_size);
  file.set_attribute("/", "step", content.step);
  write_parameter_group(file, "/params", layout, grid, positions, config.parallel.layout, params);
  write_parameter_group(file, "/grads", layout, grid, positions, config.parallel.layout, grads);

  RowBlock tokens;
  tokens.global_shape = {static_cast<std::uint64_t>(config.model.batch),
                         static_cast<std::uint64_t>(config.model.seq_len + 1)};
  tokens.row_begin = static_cast<std::uint64_t>(content.first_sample);
  // Every rank of a DP group has its samples' whole stream; one writes it.
  tokens.row_count = grid.sp_rank == 0 && grid.tp_rank == 0 && grid.first_stage() ? content.tokens.extent(0) : 0;
  file.write("/inputs/tokens", DType::i64, tokens, content.tokens.data());
  if (config.data.documents) {
    RowBlock ids = tokens;
    ids.global_shape[1] = static_cast<std::uint64_t>(config.model.seq_len);
    file.write("/inputs/document_ids", DType::i64, ids, content.document_ids.data());
  }

  RowBlock scalar;
  scalar.row_count = grid.world_rank == 0 ? 1 : 0;
  file.write("/loss", DType::f64, scalar, &content.loss);
  file.commit();
}

#define MINIATTN_INSTANTIATE(T)                                                                                   \
  template void load_parameters<T>(const std::string&, const ParameterLayout&, const ProcessGrid&,                \
                                   const std::vector<index_t>&, Layout, const ParameterBuffers<T>&);             \
  template void write_parameter_group<T>(Hdf5File&, const std::string&, const ParameterLayout&,                   \
                                         const ProcessGrid&, const std::vector<index_t>&, Layout,                 \
                                         const ParameterBuffers<T>&);                                             \
  template void write_snapshot<T>(const std::string&, const Config&, const ParameterLayout&, const ProcessGrid&,   \
                                  const std::vector<index_t>&, const ParameterBuffers<T>&,                        \
                                  const ParameterBuffers<T>&, const SnapshotContent&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::io
