#pragma once
// Internal to src/io: the HDF5 C-API plumbing under Hdf5File (hdf5_file.cpp),
// kept apart so that the class reads as what it does to a file. Nothing
// outside src/io includes this header; the rest of the code sees HDF5 only
// through hdf5_file.hpp.
//
// Errors: a failing step throws LocalError, one rank's error, which the caller
// turns into an error agreed on by every rank (agree(comm, attempt(...))),
// never an InputError raised on one rank alone.
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace miniattn::io::hdf5_detail {

// ---------------------------------------------------------------------------
// HDF5 error handling

// Turns off HDF5's automatic printing of its error stack for the lifetime of
// the object and restores whatever handler was installed before.
class QuietHdf5Errors {
 public:
  QuietHdf5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5Errors(const QuietHdf5Errors&) = delete;
  QuietHdf5Errors& operator=(const QuietHdf5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The most specific message on HDF5's current error stack (the innermost
// one, where the failure was detected), or "" when the stack is empty.
std::string hdf5_reason();

// An error recorded on one rank, to be agreed on by all (see agree()).
struct LocalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& message);

// fail() with HDF5's own reason appended.
[[noreturn]] void fail_hdf5(const std::string& message);

// Owns one HDF5 identifier and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      closer_ = other.closer_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Wraps a freshly returned identifier; a negative one is an error.
Handle checked(hid_t id, Handle::Closer closer, const std::string& what);

void check_status(herr_t status, const std::string& what);

// ---------------------------------------------------------------------------
// Types, names and shapes

// "[2, 3]", or "[] (scalar)".
std::string shape_string(const std::vector<std::uint64_t>& shape);

const char* dtype_name(DType dtype);  // "float32", "float64", "int64"
hid_t memory_type(DType dtype);       // the native type of host data
hid_t file_type(DType dtype);         // the little-endian type stored

// "float32", "int64", "uint8", "string", ... for a type stored in a file.
std::string describe_type(hid_t type);

// Whether a stored type can be read into `dtype`: float <-> float and
// integer -> integer conversions only.
bool convertible(hid_t stored, DType dtype);

// Whether `name` (absolute or relative to the root) names an existing object.
bool object_exists(hid_t file, const std::string& name);
bool dataset_exists(hid_t file, const std::string& name);

std::vector<std::uint64_t> space_shape(hid_t space);

std::string parent_directory(const std::string& path);

std::string errno_text(int err);

// ---------------------------------------------------------------------------
// Row blocks, transfers, file space

// Checks a row block against its own global shape (not the file).
void check_block(const std::string& where, const RowBlock& block);

// File and memory dataspaces selecting this rank's rows of a dataset.
struct Selection {
  Handle file_space;
  Handle memory_space;
};

Selection select_rows(const RowBlock& block);

// A transfer property list for independent raw-data I/O (see the .cpp: why
// not collective).
Handle independent_transfer();

// A file access property list for the MPI-IO driver over `comm`.
Handle mpio_access(MPI_Comm comm);

// Blocks for every byte of `temp` (named `path` in messages) that HDF5 will
// need when it flushes and closes a file whose datasets end at `data_end`.
void reserve_allocated_space(haddr_t data_end, const std::string& temp, const std::string& path);

}  // namespace miniattn::io::hdf5_detail
