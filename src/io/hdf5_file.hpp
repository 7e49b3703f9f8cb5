#pragma once
// Parallel HDF5 files (MPI-IO driver), opened and closed collectively by all
// ranks of a communicator. Global arrays are stored whole, in global order;
// each rank reads or writes a block of rows (dimension 0) of each dataset,
// independently (metadata collectively), so that an I/O error on one rank is
// agreed on by all instead of hanging them.
//
// Files opened for writing are created under a temporary name
// (<path>.tmp.<pid of rank 0>) and renamed onto <path> only by commit(), so a crash
// never leaves a broken file and never damages an existing one.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace miniattn::io {

enum class DType { f32, f64, i64 };

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

// This rank's share of a dataset: rows row_begin, row_begin + row_stride, ...
// (row_count of them, possibly 0; stride 1: a contiguous range) of
// dimension 0 and, when col_count > 0, only columns
// [col_begin, col_begin + col_count) of dimension 1 (a tensor-parallel shard of
// a row-parallel weight); row-major host data. A scalar has an empty
// global_shape and is written by the rank with row_count == 1.
struct RowBlock {
  std::vector<std::uint64_t> global_shape;
  std::uint64_t row_begin = 0;
  std::uint64_t row_count = 0;
  std::uint64_t row_stride = 1;  // parallel.layout striped: every sp-th position
  std::uint64_t col_begin = 0;
  std::uint64_t col_count = 0;  // 0: every column
};

class Hdf5File {
 public:
  // Collective. Throws InputError naming the path when it cannot be created
  // (e.g. missing or unwritable directory) or opened / is not valid HDF5.
  static Hdf5File create(const std::string& path, MPI_Comm comm);
  static Hdf5File open_read(const std::string& path, MPI_Comm comm);

  Hdf5File(Hdf5File&&) noexcept;
  Hdf5File& operator=(Hdf5File&&) noexcept;
  ~Hdf5File();  // a created file that was never committed is removed, its handle left open (below)

  // Collective: every rank calls with the same name, dtype and global shape.
  // Intermediate groups ("/params") are created as needed.
  void write(const std::string& dataset, DType dtype, const RowBlock& block, const void* data);

  // Collective. Throws InputError naming the file and dataset if it is
  // missing, or if its shape differs from expected_global_shape or its type
  // is not convertible; converts float <-> double on read.
  void read(const std::string& dataset, DType dtype, const RowBlock& block, void* data) const;

  bool has_dataset(const std::string& dataset) const;
  std::vector<std::uint64_t> dataset_shape(const std::string& dataset) const;  // throws if missing

  // Attributes on an object ("/" or a dataset), collective, same value on all ranks.
  void set_attribute(const std::string& object, const std::string& name, std::int64_t value);
  void set_attribute(const std::string& object, const std::string& name, double value);
  void set_attribute(const std::string& object, const std::string& name, const std::string& value);
  std::int64_t get_int_attribute(const std::string& object, const std::string& name) const;
  double get_double_attribute(const std::string& object, const std::string& name) const;
  std::string get_string_attribute(const std::string& object, const std::string& name) const;
  // Collective: the same answer on all ranks (older files may lack an attribute newer ones carry).
  bool has_attribute(const std::string& object, const std::string& name) const;

  // Collective: flush, close and rename the temporary file onto its final path.
  void commit();

  const std::string& path() const;

 private:
  struct Impl;
  explicit Hdf5File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether a file whose writing failed was left open (~Hdf5File): the
// process must then end through MPI_Abort, without HDF5's cleanup, which
// would close it.
bool hdf5_files_abandoned();

// Before any other HDF5 call: HDF5 then cleans up in MPI_Finalize only, not
// also at the process's exit (which MPI_Abort runs).
void hdf5_cleanup_in_mpi_finalize_only();

}  // namespace miniattn::io
