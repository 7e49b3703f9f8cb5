#pragma once
// Restart checkpoints (docs/design.md section 4, "weights/checkpoint").
//
// File layout (HDF5, written collectively, temp file + rename):
//   /params/<name>      every parameter, float32 or float64 as run, global
//                       shape and global position order whatever the rank layout
//   /optim/m/<name>     AdamW first moment  (absent for sgd)
//   /optim/v/<name>     AdamW second moment (absent for sgd)
//   attributes on "/":  step (the next step to run), optimizer_steps, seed,
//                       optimizer, task, beta1, beta2, eps, deterministic,
//                       checksum_algorithm, parameter_type (fp32 or fp64: the
//                       stored float type of every dataset above), and the
//                       config (io::write_config_attributes; "precision" is
//                       model.precision, bf16 included). Files written before
//                       parameter_type existed hold the stored type in "precision".

//   attribute "checksum" on every dataset: CRC-32 (zlib) of the dataset's
//                       stored little-endian bytes in global row-major order,
//                       as an int64. It does not depend on the rank layout.
//
// A checkpoint written by any rank layout (dp x sp, contiguous|zigzag) can be
// read by any other, and in either precision. Every problem on reading is an
// InputError naming the file (and the dataset), raised on every rank together.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "io/restart_review.hpp"
#include "model/parameter_layout.hpp"
#include "model/parameters.hpp"

namespace miniattn::io {

// What a restart needs besides the parameters and the optimizer moments.
struct CheckpointState {
  std::int64_t step = 0;             // the next step to run
  std::int64_t optimizer_steps = 0;  // Optimizer::steps_taken() (Adam bias correction)
  std::uint64_t seed = 0;
};

// What read_checkpoint gives back: the state, and one line per change the deck
// makes on purpose (review_restart), for rank 0 to print.
struct CheckpointRead : CheckpointState {
  std::vector<std::string> warnings;
};

// Collective over grid.world. adam_m / adam_v may be null (sgd): no /optim is
// written then. positions: the global positions of this rank's wpe rows, laid
// out as config.parallel.layout says (comm/process_grid.hpp owned_positions).
template <class T>
void write_checkpoint(const std::string& path, const Config& config, const ParameterLayout& layout,
                      const ProcessGrid& grid, const std::vector<index_t>& positions, const ParameterBuffers<T>& params,
                      const ParameterBuffers<T>* adam_m, const ParameterBuffers<T>* adam_v,
                      const CheckpointState& state);

// Collective over grid.world. Reads the parameters (and the moments, when
// adam_m / adam_v are given) into this rank's buffers, verifying every
// dataset's checksum. Before reading any dataset it reviews the config
// (review_restart): a refused change throws RestartRefused on every rank, the
// warnings come back with the state. Precision and rank layout may differ. A
// checkpoint without moments cannot be read into an AdamW run; moments in the
// file are ignored when none are asked for. After an error the buffers are
// unspecified (on a host backend they may hold part of the file).
template <class T>
CheckpointRead read_checkpoint(const std::string& path, const Config& config, const ParameterLayout& layout,
                               const ProcessGrid& grid, const std::vector<index_t>& positions,
                               const ParameterBuffers<T>& params, const ParameterBuffers<T>* adam_m,
                               const ParameterBuffers<T>* adam_v);

// CRC-32 of `bytes` bytes appended to a running `crc` (start from 0). Exposed
// for tests and tools.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::uint64_t bytes);

}  // namespace miniattn::io
