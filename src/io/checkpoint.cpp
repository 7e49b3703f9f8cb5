// Restart checkpoints: parameters, AdamW moments, step counters and a
// layout-independent CRC-32 per dataset (see checkpoint.hpp).
//
// Checksums. A dataset is stored whole in global order, but each rank holds
// only some of it (wpe rows, a tensor-parallel shard) or all of it (replicated
// tensors). The checksum is the CRC-32 of the stored little-endian bytes of
// the whole dataset; ranks checksum the contiguous runs of elements they hold
// (a row block, or one row of a column shard) and the runs are combined in
// global order with crc32_combine, which gives exactly the CRC of the
// concatenation. So neither writing nor reading ever moves a dataset between
// ranks to checksum it.
//   write: the writer of each block (see writes_blocks_of) checksums it and the
//          pieces are combined over the world.
//   read:  every rank checks what it read: replicated tensors alone, wpe runs
//          combined over its SP group (one replica of the sequence), tensor-
//          parallel shards over its TP group (one replica of each tensor);
//          the tensors of its pipeline stage only.
#include "io/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "comm/agree.hpp"
#include "comm/watched_mpi.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "io/hdf5_file.hpp"
#include "io/parameter_io.hpp"
#include "io/restart_review.hpp"

namespace miniattn::io {

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::uint64_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong value = crc;
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 30;  // crc32() takes a uInt length
  while (bytes > 0) {
    const std::uint64_t n = std::min(bytes, kChunk);
    value = ::crc32(value, p, static_cast<uInt>(n));
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(value);
}

namespace {

constexpr const char* kChecksumAttribute = "checksum";
constexpr const char* kChecksumAlgorithm =
    "crc32 (zlib) of the little-endian stored bytes of the whole dataset in row-major order";

bool host_is_little_endian() {
  const std::uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// CRC-32 of `count` values as stored in the file (IEEE little-endian).
template <class S>
std::uint32_t crc_of_values(std::uint32_t crc, const S* values, std::uint64_t count) {
  if (host_is_little_endian()) return crc32_update(crc, values, count * sizeof(S));
  unsigned char bytes[sizeof(S)];
  for (std::uint64_t i = 0; i < count; ++i) {
    std::memcpy(bytes, values + i, sizeof(S));
    std::reverse(bytes, bytes + sizeof(S));
    crc = crc32_update(crc, bytes, sizeof(S));
  }
  return crc;
}

std::string hex(std::uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%08llx", static_cast<unsigned long long>(value));
  return text;
}

template <class T>
const char* precision_name() {
  return std::is_same_v<T, float> ? "fp32" : "fp64";
}

// One dataset of a checkpoint: group + "/" + parameter name.
struct Dataset {
  std::string name;
  const ParameterInfo* parameter = nullptr;
  std::size_t group = 0;     // index into the list of buffers
  std::uint64_t elements = 0;  // of the whole tensor
};

std::vector<Dataset> list_datasets(const std::vector<std::string>& groups, const ParameterLayout& layout) {
  std::vector<Dataset> result;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const ParameterInfo& p : layout.parameters()) {
      Dataset d;
      d.name = groups[g] + "/" + p.name;
      d.parameter = &p;
      d.group = g;
      d.elements = 1;
      for (index_t extent : p.global_shape) d.elements *= static_cast<std::uint64_t>(extent);
      result.push_back(d);
    }
  }
  return result;
}

// A contiguous run of elements of one dataset held by this rank, with its CRC-32.
struct Piece {
  std::uint64_t dataset = 0;
  std::uint64_t element_begin = 0;
  std::uint64_t element_count = 0;
  std::uint64_t crc = 0;
};

// The pieces of one block, in global order: values holds the block row-major.
template <class S>
void add_pieces(std::uint64_t dataset, const RowBlock& block, const S* values, std::vector<Piece>& pieces) {
  std::uint64_t width = 1;
  for (std::size_t i = 1; i < block.global_shape.size(); ++i) width *= block.global_shape[i];
  if (block.col_count == 0 && block.row_stride == 1) {
    const std::uint64_t count = block.row_count * width;
    pieces.push_back(Piece{dataset, block.row_begin * width, count, crc_of_values(0, values, count)});
    return;
  }
  // One piece per row of a column shard or of strided rows.
  const std::uint64_t cols = block.col_count > 0 ? block.col_count : width;
  for (std::uint64_t r = 0; r < block.row_count; ++r) {
    const std::uint64_t begin = (block.row_begin + r * block.row_stride) * width + block.col_begin;
    pieces.push_back(Piece{dataset, begin, cols, crc_of_values(0, values + r * cols, cols)});
  }
}

// Collective over comm: combines the pieces of all ranks, per dataset in
// global order, into the CRC of the whole dataset. The pieces of a dataset
// must tile it exactly; otherwise `error` says which dataset does not.
// Datasets without pieces are left as they are in `crcs`.
void combine_pieces(MPI_Comm comm, const std::vector<Piece>& local, const std::vector<Dataset>& datasets,
                    std::size_t element_bytes, const std::string& path, std::vector<std::uint32_t>& crcs,
                    std::string& error) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<std::uint64_t> send;
  for (const Piece& p : local) send.insert(send.end(), {p.dataset, p.element_begin, p.element_count, p.crc});
  const int count = static_cast<int>(send.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  watched_allgather(&count, 1, MPI_INT, counts.data(), comm, "checksums.counts");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::uint64_t> received(static_cast<std::size_t>(total));
  watched_allgatherv(send.data(), count, MPI_UINT64_T, received.data(), counts.data(), displs.data(), comm,
                     "checksums.pieces");

  std::vector<Piece> all;
  for (std::size_t i = 0; i + 3 < received.size(); i += 4) {
    all.push_back(Piece{received[i], received[i + 1], received[i + 2], received[i + 3]});
  }
  std::sort(all.begin(), all.end(), [](const Piece& a, const Piece& b) {
    return a.dataset != b.dataset ? a.dataset < b.dataset : a.element_begin < b.element_begin;
  });
  for (std::size_t i = 0; i < all.size();) {
    const std::uint64_t id = all[i].dataset;
    const Dataset& d = datasets[static_cast<std::size_t>(id)];
    std::uint64_t next = 0;
    std::uint32_t crc = 0;
    for (; i < all.size() && all[i].dataset == id; ++i) {
      const Piece& p = all[i];
      if (p.element_count == 0) continue;
      if (p.element_begin != next && error.empty()) {
        error = path + ": dataset " + d.name + ": the ranks' blocks do not tile it (element " +
                std::to_string(next) + " is followed by element " + std::to_string(p.element_begin) + ")";
      }
      next = p.element_begin + p.element_count;
      crc = static_cast<std::uint32_t>(::crc32_combine64(crc, static_cast<uLong>(p.crc),
                                                         static_cast<z_off64_t>(p.element_count * element_bytes)));
    }
    if (next != d.elements && error.empty()) {
      error = path + ": dataset " + d.name + ": the ranks' blocks cover elements [0, " + std::to_string(next) +
              ") of " + std::to_string(d.elements);
    }
    crcs[static_cast<std::size_t>(id)] = crc;
  }
}

// Host copies of one set of buffers (the buffers themselves on a host backend).
template <class T>
struct HostBuffers {
  Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace> replicated;
  Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace> sharded;
};

// ---------------------------------------------------------------------------
// Writing

// The checksum of every dataset as written by write_parameter_group, the same
// value on every rank. Collective over grid.world.
template <class T>
std::vector<std::uint32_t> checksums_for_write(const std::string& path, const std::vector<Dataset>& datasets,
                                               const std::vector<HostBuffers<T>>& host, const ProcessGrid& grid,
                                               const std::vector<index_t>& positions,
                                               Layout position_layout) {
  std::vector<std::uint32_t> crcs(datasets.size(), 0);
  std::vector<Piece> pieces;
  for (std::size_t id = 0; id < datasets.size(); ++id) {
    const ParameterInfo& p = *datasets[id].parameter;
    if (!writes_blocks_of(p, grid)) continue;
    const HostBuffers<T>& h = host[datasets[id].group];
    const T* buffer = p.sharded ? h.sharded.data() : h.replicated.data();
    for (const LocalBlock& b : local_blocks(p, positions, position_layout))
      add_pieces(id, b.block, buffer + b.buffer_offset, pieces);
  }
  std::string error;
  combine_pieces(grid.world, pieces, datasets, sizeof(T), path, crcs, error);
  agree(grid.world, error);
  return crcs;
}

// ---------------------------------------------------------------------------
// Reading

// Reads a block of a dataset stored as S into `destination` (T) and adds the
// pieces of the stored bytes. Collective over the file's communicator.
template <class T, class S>
void read_block(const Hdf5File& file, std::uint64_t id, const std::string& dataset, const RowBlock& block,
                T* destination, std::vector<Piece>& pieces) {
  std::uint64_t n = block.row_count * (block.col_count > 0 ? block.col_count : 1);
  for (std::size_t i = block.col_count > 0 ? 2 : 1; i < block.global_shape.size(); ++i) n *= block.global_shape[i];
  if constexpr (std::is_same_v<T, S>) {
    file.read(dataset, dtype_of<S>(), block, destination);
    add_pieces(id, block, destination, pieces);
  } else {
    std::vector<S> stored(static_cast<std::size_t>(n));
    file.read(dataset, dtype_of<S>(), block, stored.data());
    for (std::uint64_t i = 0; i < n; ++i) destination[i] = static_cast<T>(stored[i]);
    add_pieces(id, block, stored.data(), pieces);
  }
}

// Reads every dataset into the host buffers and returns the checksum of what
// this rank read, combined with the rest of its replica (see the top).
template <class T, class S>
std::vector<std::uint32_t> read_datasets(const Hdf5File& file, const std::vector<Dataset>& datasets,
                                         const std::vector<HostBuffers<T>>& host, const ProcessGrid& grid,
                                         const std::vector<index_t>& positions,
                                         Layout position_layout, std::string& error) {
  std::vector<std::uint32_t> crcs(datasets.size(), 0);
  std::vector<Piece> whole, wpe, shards, other_stages;  // the last: read as nothing, not checked here
  for (std::size_t id = 0; id < datasets.size(); ++id) {
    const ParameterInfo& p = *datasets[id].parameter;
    const HostBuffers<T>& h = host[datasets[id].group];
    T* buffer = p.sharded ? h.sharded.data() : h.replicated.data();
    std::vector<Piece>& pieces = !p.held ? other_stages : p.sharded ? wpe : p.tensor_shard.dim >= 0 ? shards : whole;
    for (const LocalBlock& b : local_blocks(p, positions, position_layout))
      read_block<T, S>(file, id, datasets[id].name, b.block, buffer + b.buffer_offset, pieces);
  }
  for (const Piece& p : whole) crcs[static_cast<std::size_t>(p.dataset)] = static_cast<std::uint32_t>(p.crc);
  combine_pieces(grid.sp_comm, wpe, datasets, sizeof(S), file.path(), crcs, error);
  combine_pieces(grid.tp_comm, shards, datasets, sizeof(S), file.path(), crcs, error);
  return crcs;
}

// An error message from Hdf5File without its leading "<path>: ".
std::string without_path(const std::string& path, const std::string& message) {
  const std::string prefix = path + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

// An int attribute of "/" that every checkpoint has.
std::int64_t required_int(const Hdf5File& file, const std::string& name) {
  try {
    return file.get_int_attribute("/", name);
  } catch (const InputError& e) {
    throw InputError(file.path() + ": not a miniattn checkpoint (" + without_path(file.path(), e.what()) + ")");
  }
}

// Fault injection for the crash-safety test: MINIATTN_FAULT_KILL_IN_CHECKPOINT=S
// makes rank 0 die by SIGKILL halfway through writing the checkpoint of step S.
void kill_if_requested(std::int64_t step, int world_rank) {
  const char* text = std::getenv("MINIATTN_FAULT_KILL_IN_CHECKPOINT");
  if (text != nullptr && world_rank == 0 && std::atoll(text) == step) std::raise(SIGKILL);
}

// The groups of a checkpoint and the buffers they hold: /params, then the
// AdamW moments when given (the same list for writing and for reading).
template <class T>
std::pair<std::vector<std::string>, std::vector<const ParameterBuffers<T>*>> checkpoint_groups(
    const ParameterBuffers<T>& params, const ParameterBuffers<T>* adam_m, const ParameterBuffers<T>* adam_v) {
  std::pair<std::vector<std::string>, std::vector<const ParameterBuffers<T>*>> out{{"/params"}, {&params}};
  if (adam_m != nullptr) {
    out.first.push_back("/optim/m");
    out.second.push_back(adam_m);
  }
  if (adam_v != nullptr) {
    out.first.push_back("/optim/v");
    out.second.push_back(adam_v);
  }
  return out;
}

}  // namespace

template <class T>
void write_checkpoint(const std::string& path, const Config& config, const ParameterLayout& layout,
                      const ProcessGrid& grid, const std::vector<index_t>& positions, const ParameterBuffers<T>& params,
                      const ParameterBuffers<T>* adam_m, const ParameterBuffers<T>* adam_v,
                      const CheckpointState& state) {
  const auto [groups, buffers] = checkpoint_groups(params, adam_m, adam_v);
  const std::vector<Dataset> datasets = list_datasets(groups, layout);

  compat::fence("miniattn::write_checkpoint");
  std::vector<HostBuffers<T>> host;
  for (const ParameterBuffers<T>* b : buffers) {
    host.push_back(HostBuffers<T>{Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b->replicated),
                                  Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b->sharded)});
  }
  const std::vector<std::uint32_t> crcs =
      checksums_for_write(path, datasets, host, grid, positions, config.parallel.layout);

  Hdf5File file = Hdf5File::create(path, grid.world);
  write_config_attributes(file, config, grid.world_size);
  // The stored datasets' type: fp32 master parameters under bf16.
  file.set_attribute("/", kParameterTypeAttribute, std::string(precision_name<T>()));
  file.set_attribute("/", "step", state.step);
  file.set_attribute("/", "optimizer_steps", state.optimizer_steps);
  file.set_attribute("/", "seed", static_cast<std::int64_t>(state.seed));
  const OptimizerKind optimizer = adam_m != nullptr ? OptimizerKind::adamw : config.train.optimizer;
  file.set_attribute("/", "optimizer", std::string(to_string(optimizer)));
  // restart_keys compares these.
  file.set_attribute("/", "task", std::string(to_string(config.data.task)));
  file.set_attribute("/", "beta1", config.train.beta1);
  file.set_attribute("/", "beta2", config.train.beta2);
  file.set_attribute("/", "eps", config.train.eps);
  file.set_attribute("/", "deterministic", static_cast<std::int64_t>(config.kernels.deterministic ? 1 : 0));
  file.set_attribute("/", "checksum_algorithm", std::string(kChecksumAlgorithm));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    write_parameter_group(file, groups[g], layout, grid, positions, config.parallel.layout, *buffers[g]);
    kill_if_requested(state.step, grid.world_rank);
  }
  for (std::size_t id = 0; id < datasets.size(); ++id) {
    file.set_attribute(datasets[id].name, kChecksumAttribute, static_cast<std::int64_t>(crcs[id]));
  }
  file.commit();  // flushes, closes, syncs and renames onto `path`
}

namespace {

// 1. Is it a checkpoint? Its step counts and the stored precision.
CheckpointState read_checkpoint_header(const Hdf5File& file, const std::string& path, std::string& precision) {
  CheckpointState state;
  state.step = required_int(file, "step");
  state.optimizer_steps = required_int(file, "optimizer_steps");
  state.seed = static_cast<std::uint64_t>(required_int(file, "seed"));
  if (state.step < 0 || state.optimizer_steps < 0) {
    throw InputError(path + ": checkpoint holds step " + std::to_string(state.step) + " and optimizer_steps " +
                     std::to_string(state.optimizer_steps) + ", expected non-negative values");
  }
  const char* attribute =
      file.has_attribute("/", kParameterTypeAttribute) ? kParameterTypeAttribute : "precision";  // older files
  try {
    precision = file.get_string_attribute("/", attribute);
  } catch (const InputError& e) {
    throw InputError(path + ": not a miniattn checkpoint (" + without_path(path, e.what()) + ")");
  }
  if (precision != "fp32" && precision != "fp64") {
    throw InputError(path + ": attribute " + attribute + " on / is \"" + precision + "\", expected fp32 or fp64");
  }
  return state;
}

// 2. Every dataset we need is there (agreed over `world`), with its checksum.
std::vector<std::uint64_t> stored_checksums(const Hdf5File& file, const std::string& path,
                                            const std::vector<Dataset>& datasets, MPI_Comm world) {
  std::string error;
  for (const Dataset& d : datasets) {
    if (!file.has_dataset(d.name)) {
      error = path + ": dataset " + d.name + " not found";
      if (d.group > 0) {
        error += ": the checkpoint holds no AdamW moments (written by an sgd run?) and train.optimizer is adamw";
      }
      break;
    }
  }
  agree(world, error);
  std::vector<std::uint64_t> stored(datasets.size());
  for (std::size_t id = 0; id < datasets.size(); ++id) {
    std::int64_t value = 0;
    try {
      value = file.get_int_attribute(datasets[id].name, kChecksumAttribute);
    } catch (const InputError& e) {
      throw InputError(path + ": dataset " + datasets[id].name + " has no checksum: not a miniattn checkpoint (" +
                       without_path(path, e.what()) + ")");
    }
    if (value < 0 || value > 0xffffffffLL) {
      throw InputError(path + ": dataset " + datasets[id].name + ": attribute checksum " + std::to_string(value) +
                       " is not a CRC-32");
    }
    stored[id] = static_cast<std::uint64_t>(value);
  }
  return stored;
}

}  // namespace

template <class T>
CheckpointRead read_checkpoint(const std::string& path, const Config& config, const ParameterLayout& layout,
                               const ProcessGrid& grid, const std::vector<index_t>& positions,
                               const ParameterBuffers<T>& params, const ParameterBuffers<T>* adam_m,
                               const ParameterBuffers<T>* adam_v) {
  Hdf5File file = Hdf5File::open_read(path, grid.world);
  std::string precision;
  CheckpointRead state{read_checkpoint_header(file, path, precision), {}};
  // Before any dataset is read (a collective): refused on every rank alike.
  RestartReview review = review_restart(read_held_config(file), config, path);
  if (!review.refusal.empty()) throw RestartRefused(review.refusal);
  state.warnings = std::move(review.warnings);
  const auto [groups, buffers] = checkpoint_groups(params, adam_m, adam_v);
  const std::vector<Dataset> datasets = list_datasets(groups, layout);
  const std::vector<std::uint64_t> stored = stored_checksums(file, path, datasets, grid.world);
  std::string error;

  // 3. Read in the stored type, checksum, convert.
  std::vector<HostBuffers<T>> host;
  for (const ParameterBuffers<T>* b : buffers) {
    host.push_back(HostBuffers<T>{Kokkos::create_mirror_view(Kokkos::HostSpace(), b->replicated),
                                  Kokkos::create_mirror_view(Kokkos::HostSpace(), b->sharded)});
  }
  const std::vector<std::uint32_t> computed =
      precision == "fp64"
          ? read_datasets<T, double>(file, datasets, host, grid, positions, config.parallel.layout, error)
          : read_datasets<T, float>(file, datasets, host, grid, positions, config.parallel.layout, error);
  for (std::size_t id = 0; id < datasets.size() && error.empty(); ++id) {
    if (datasets[id].parameter->held && computed[id] != stored[id]) {
      error = path + ": dataset " + datasets[id].name + ": checksum mismatch (stored " + hex(stored[id]) +
              ", computed " + hex(computed[id]) + ")";
    }
  }
  agree(grid.world, error);

  for (std::size_t g = 0; g < buffers.size(); ++g) {
    Kokkos::deep_copy(buffers[g]->replicated, host[g].replicated);
    Kokkos::deep_copy(buffers[g]->sharded, host[g].sharded);
  }
  compat::fence("miniattn::read_checkpoint");
  return state;
}

#define MINIATTN_INSTANTIATE(T)                                                                                     \
  template void write_checkpoint<T>(const std::string&, const Config&, const ParameterLayout&, const ProcessGrid&,   \
                                    const std::vector<index_t>&, const ParameterBuffers<T>&,                        \
                                    const ParameterBuffers<T>*, const ParameterBuffers<T>*, const CheckpointState&); \
  template CheckpointRead read_checkpoint<T>(const std::string&, const Config&, const ParameterLayout&,             \
                                             const ProcessGrid&, const std::vector<index_t>&,                       \
                                             const ParameterBuffers<T>&, const ParameterBuffers<T>*,                \
                                             const ParameterBuffers<T>*);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::io
