// Parallel HDF5 files through the MPI-IO driver (HDF5 C API).
//
// Every fallible step follows the same pattern, so that an error is raised on
// every rank together (never a hang with some ranks inside a collective call
// and others unwinding): each rank does its part and records an error message
// instead of throwing; then agree() finds the lowest rank that failed,
// broadcasts its message and every rank throws the same InputError.
//
// The HDF5 C-API plumbing the class stands on (error capture, identifiers,
// selections, property lists) is in hdf5_handles.hpp/.cpp.
#include "io/hdf5_file.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>

#include "comm/agree.hpp"
#include "comm/watched_mpi.hpp"
#include "core/error.hpp"
#include "io/hdf5_handles.hpp"

namespace miniattn::io {
// The plumbing is this file's vocabulary: named here once rather than at every call.
using namespace hdf5_detail;

namespace {

// Files left open by ~Impl after their writing failed.
std::atomic<int> abandoned_files{0};

}  // namespace

bool hdf5_files_abandoned() { return abandoned_files.load() > 0; }

void hdf5_cleanup_in_mpi_finalize_only() { H5dont_atexit(); }

// ---------------------------------------------------------------------------

struct Hdf5File::Impl {
  std::string path;       // final path
  std::string temp_path;  // where a created file lives until commit()
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  hid_t file = -1;
  bool writable = false;
  bool committed = false;
  haddr_t data_end = 0;  // of the datasets written so far (commit() reserves beyond it)

  Impl(const std::string& p, MPI_Comm c) : path(p) {
    MPI_Comm_dup(c, &comm);
    MPI_Comm_rank(comm, &rank);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Never throws. A file being written that was not committed (its writing
  // failed) is not closed: HDF5's close writes metadata from rank 0 inside
  // collectives, and if that write fails too, rank 0 leaves them while the
  // others wait for ever. Rank 0 removes the temporary file; the open handle
  // is left to the process's end, which must skip HDF5's cleanup
  // (hdf5_files_abandoned()).
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // too late for MPI-IO; nothing sensible to do
    QuietHdf5Errors quiet;
    const bool abandoned = writable && !committed;
    if (abandoned && file >= 0) abandoned_files.fetch_add(1);
    if (!abandoned && file >= 0) H5Fclose(file);
    file = -1;
    if (abandoned && !temp_path.empty()) {
      if (rank == 0) std::remove(temp_path.c_str());
      MPI_Barrier(comm);  // gone for every rank once it leaves
    }
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  std::string where(const std::string& dataset) const { return path + ": dataset " + dataset; }

  void require_open(const char* operation) const {
    if (file < 0) {
      throw std::logic_error(path + ": " + operation + " on a file that is already committed");
    }
  }
  void require_writable(const char* operation) const {
    require_open(operation);
    if (!writable) throw std::logic_error(path + ": " + operation + " on a file opened for reading");
  }

  // Opens an object ("/" or a dataset path) for attribute access.
  Handle open_object(const std::string& object) const {
    if (!object_exists(file, object)) fail(path + ": object " + object + " not found");
    return checked(H5Oopen(file, object.c_str(), H5P_DEFAULT), H5Oclose,
                   path + ": cannot open object " + object);
  }

  // Opens attribute `name` of `object` (throws naming both if missing).
  Handle open_attribute(const std::string& object, const std::string& name, Handle& holder) const {
    holder = open_object(object);
    const htri_t exists = H5Aexists(holder.get(), name.c_str());
    if (exists < 0) fail_hdf5(path + ": cannot look up attribute " + name + " on " + object);
    if (exists == 0) fail(path + ": attribute " + name + " not found on " + object);
    return checked(H5Aopen(holder.get(), name.c_str(), H5P_DEFAULT), H5Aclose,
                   path + ": cannot open attribute " + name + " on " + object);
  }

  // Collective: replaces attribute `name` of `object` by a scalar of `type`
  // holding `value` (of memory type `mem_type`).
  void write_attribute(const std::string& object, const std::string& name, hid_t type, hid_t mem_type,
                       const void* value) {
    require_writable("set_attribute");
    QuietHdf5Errors quiet;
    const std::string what = path + ": cannot write attribute " + name + " on " + object;
    Handle holder;
    agree(comm, attempt([&] { holder = open_object(object); }));
    agree(comm, attempt([&] {
            const htri_t exists = H5Aexists(holder.get(), name.c_str());
            if (exists < 0) fail_hdf5(what);
            if (exists > 0) check_status(H5Adelete(holder.get(), name.c_str()), what);
            Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, what);
            Handle attribute = checked(
                H5Acreate2(holder.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose, what);
            check_status(H5Awrite(attribute.get(), mem_type, value), what);
          }));
  }

  // Collective: reads a single-element numeric attribute as `dtype`.
  void read_numeric_attribute(const std::string& object, const std::string& name, DType dtype,
                              void* value) const {
    require_open("get_attribute");
    QuietHdf5Errors quiet;
    agree(comm, attempt([&] {
            Handle holder;
            Handle attribute = open_attribute(object, name, holder);
            const std::string what = path + ": attribute " + name + " on " + object;
            Handle type = checked(H5Aget_type(attribute.get()), H5Tclose, what + ": cannot read its type");
            if (!convertible(type.get(), dtype)) {
              fail(what + " has type " + describe_type(type.get()) + ", expected " +
                   (dtype == DType::i64 ? "an integer" : "a floating-point number"));
            }
            Handle space = checked(H5Aget_space(attribute.get()), H5Sclose, what + ": cannot read its shape");
            if (H5Sget_simple_extent_npoints(space.get()) != 1) {
              fail(what + " has shape " + shape_string(space_shape(space.get())) + ", expected a single value");
            }
            check_status(H5Aread(attribute.get(), memory_type(dtype), value), what + ": cannot read it");
          }));
  }
};

Hdf5File::Hdf5File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Hdf5File::Hdf5File(Hdf5File&&) noexcept = default;
Hdf5File& Hdf5File::operator=(Hdf5File&&) noexcept = default;
Hdf5File::~Hdf5File() = default;

const std::string& Hdf5File::path() const { return impl_->path; }

Hdf5File Hdf5File::create(const std::string& path, MPI_Comm comm) {
  QuietHdf5Errors quiet;
  auto impl = std::make_unique<Impl>(path, comm);
  MPI_Comm c = impl->comm;

  // Rank 0 checks the directory and picks the temporary name.
  std::string temp;
  agree(c, impl->rank != 0 ? std::string() : attempt([&] {
    const std::string dir = parent_directory(path);
    struct stat info {};
    if (path.empty() || path.back() == '/') fail(path + ": cannot create file: not a file name");
    if (stat(dir.c_str(), &info) != 0) {
      fail(path + ": cannot create file: directory " + dir + ": " + errno_text(errno));
    }
    if (!S_ISDIR(info.st_mode)) fail(path + ": cannot create file: " + dir + " is not a directory");
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      fail(path + ": cannot create file: directory " + dir + " is not writable");
    }
    if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      fail(path + ": cannot create file: it is a directory");
    }
    temp = path + ".tmp." + std::to_string(static_cast<long long>(getpid()));
  }));
  int length = static_cast<int>(temp.size());
  watched_bcast(&length, 1, MPI_INT, 0, c, "file.temporary_name");
  temp.resize(static_cast<std::size_t>(length));
  watched_bcast(&temp[0], length, MPI_CHAR, 0, c, "file.temporary_name");

  std::string error = attempt([&] {
    Handle fapl = mpio_access(c);
    // HDF5 writes metadata when the file is flushed or closed, inside its own
    // collectives. By default it shares those writes out among the ranks, and
    // a rank whose share fails (and not the others') leaves them waiting until
    // the job's time limit. Rank 0 alone writes metadata here, so a failing
    // write on another rank can only be one of its raw-data writes, which
    // every rank agrees on (Hdf5File::write), and rank 0's own metadata
    // writes land in space that commit() reserved first.
    H5AC_cache_config_t cache{};
    cache.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    check_status(H5Pget_mdc_config(fapl.get(), &cache), "cannot read the metadata cache settings");
    cache.metadata_write_strategy = H5AC_METADATA_WRITE_STRATEGY__PROCESS_0_ONLY;
    check_status(H5Pset_mdc_config(fapl.get(), &cache), "cannot set the metadata write strategy");
    const hid_t file = H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
    if (file < 0) fail_hdf5(path + ": cannot create file " + temp);
    impl->file = file;
  });
  impl->writable = true;
  impl->temp_path = temp;  // from here on, ~Impl removes it unless committed
  agree(c, error);
  return Hdf5File(std::move(impl));
}

Hdf5File Hdf5File::open_read(const std::string& path, MPI_Comm comm) {
  QuietHdf5Errors quiet;
  auto impl = std::make_unique<Impl>(path, comm);
  MPI_Comm c = impl->comm;

  // Rank 0 tells a missing or non-HDF5 file apart from one HDF5 cannot open.
  agree(c, impl->rank != 0 ? std::string() : attempt([&] {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0) fail(path + ": cannot open file: " + errno_text(errno));
    if (S_ISDIR(info.st_mode)) fail(path + ": cannot open file: it is a directory");
    if (access(path.c_str(), R_OK) != 0) fail(path + ": cannot open file: not readable");
#if H5_VERSION_GE(1, 12, 0)
    const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
    const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
    if (is_hdf5 == 0) fail(path + ": not an HDF5 file");
    if (is_hdf5 < 0) fail_hdf5(path + ": cannot open file as HDF5");
  }));

  agree(c, attempt([&] {
    Handle fapl = mpio_access(c);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
    if (file < 0) fail_hdf5(path + ": cannot open HDF5 file");
    impl->file = file;
  }));
  return Hdf5File(std::move(impl));
}

void Hdf5File::write(const std::string& dataset, DType dtype, const RowBlock& block, const void* data) {
  Impl& f = *impl_;
  f.require_writable("write");
  QuietHdf5Errors quiet;
  const std::string where = f.where(dataset);

  // 1. Local checks; an existing dataset must match in type and shape.
  bool exists = false;
  agree(f.comm, attempt([&] {
          check_block(where, block);
          if (block.row_count > 0 && data == nullptr) fail(where + ": no data to write");
          exists = dataset_exists(f.file, dataset);
          if (!exists && object_exists(f.file, dataset)) fail(where + ": the name exists and is not a dataset");
          if (exists) {
            Handle d = checked(H5Dopen2(f.file, dataset.c_str(), H5P_DEFAULT), H5Dclose, where + ": cannot open");
            Handle type = checked(H5Dget_type(d.get()), H5Tclose, where + ": cannot read its type");
            Handle space = checked(H5Dget_space(d.get()), H5Sclose, where + ": cannot read its shape");
            const auto shape = space_shape(space.get());
            if (shape != block.global_shape) {
              fail(where + " exists with shape " + shape_string(shape) + ", writing " +
                   shape_string(block.global_shape));
            }
            if (!convertible(type.get(), dtype)) {
              fail(where + " exists with type " + describe_type(type.get()) + ", writing " + dtype_name(dtype));
            }
          }
        }));

  // 2. Collective create (with intermediate groups) or open, and selections.
  Handle d;
  Selection sel;
  agree(f.comm, attempt([&] {
          sel = select_rows(block);
          if (exists) {
            d = checked(H5Dopen2(f.file, dataset.c_str(), H5P_DEFAULT), H5Dclose, where + ": cannot open");
            return;
          }
          Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, where + ": cannot create it");
          check_status(H5Pset_create_intermediate_group(lcpl.get(), 1), where + ": cannot create it");
          Handle dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, where + ": cannot create it");
          // Every element is written by someone: no need to write fill values first.
          check_status(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), where + ": cannot create it");
          d = checked(H5Dcreate2(f.file, dataset.c_str(), file_type(dtype), sel.file_space.get(), lcpl.get(),
                                 dcpl.get(), H5P_DEFAULT),
                      H5Dclose, where + ": cannot create it");
        }));

  // 3. Each rank's rows.
  agree(f.comm, attempt([&] {
          Handle dxpl = independent_transfer();
          static const double dummy = 0;
          const void* buffer = data != nullptr ? data : &dummy;
          check_status(H5Dwrite(d.get(), memory_type(dtype), sel.memory_space.get(), sel.file_space.get(),
                                dxpl.get(), buffer),
                       where + ": write failed");
        }));
  const haddr_t offset = H5Dget_offset(d.get());  // storage allocated at creation (parallel HDF5)
  if (offset != HADDR_UNDEF) f.data_end = std::max<haddr_t>(f.data_end, offset + H5Dget_storage_size(d.get()));
}

void Hdf5File::read(const std::string& dataset, DType dtype, const RowBlock& block, void* data) const {
  const Impl& f = *impl_;
  f.require_open("read");
  QuietHdf5Errors quiet;
  const std::string where = f.where(dataset);

  Handle d;
  Selection sel;
  agree(f.comm, attempt([&] {
          check_block(where, block);
          if (block.row_count > 0 && data == nullptr) fail(where + ": no buffer to read into");
          if (!dataset_exists(f.file, dataset)) fail(where + " not found");
          d = checked(H5Dopen2(f.file, dataset.c_str(), H5P_DEFAULT), H5Dclose, where + ": cannot open");
          Handle type = checked(H5Dget_type(d.get()), H5Tclose, where + ": cannot read its type");
          Handle space = checked(H5Dget_space(d.get()), H5Sclose, where + ": cannot read its shape");
          const auto shape = space_shape(space.get());
          if (shape != block.global_shape) {
            fail(where + " has shape " + shape_string(shape) + ", expected " + shape_string(block.global_shape));
          }
          if (!convertible(type.get(), dtype)) {
            fail(where + " has type " + describe_type(type.get()) + ", expected " + dtype_name(dtype));
          }
          sel = select_rows(block);
        }));

  agree(f.comm, attempt([&] {
          Handle dxpl = independent_transfer();
          double dummy = 0;
          void* buffer = data != nullptr ? data : &dummy;
          check_status(H5Dread(d.get(), memory_type(dtype), sel.memory_space.get(), sel.file_space.get(),
                               dxpl.get(), buffer),
                       where + ": read failed");
        }));
}

bool Hdf5File::has_dataset(const std::string& dataset) const {
  impl_->require_open("has_dataset");
  QuietHdf5Errors quiet;
  return dataset_exists(impl_->file, dataset);
}

bool Hdf5File::has_attribute(const std::string& object, const std::string& name) const {
  const Impl& f = *impl_;
  f.require_open("has_attribute");
  QuietHdf5Errors quiet;
  bool exists = false;
  agree(f.comm, attempt([&] {
          Handle holder = f.open_object(object);
          const htri_t found = H5Aexists(holder.get(), name.c_str());
          if (found < 0) fail_hdf5(f.path + ": cannot look up attribute " + name + " on " + object);
          exists = found > 0;
        }));
  return exists;
}

std::vector<std::uint64_t> Hdf5File::dataset_shape(const std::string& dataset) const {
  const Impl& f = *impl_;
  f.require_open("dataset_shape");
  QuietHdf5Errors quiet;
  const std::string where = f.where(dataset);
  try {
    if (!dataset_exists(f.file, dataset)) fail(where + " not found");
    Handle d = checked(H5Dopen2(f.file, dataset.c_str(), H5P_DEFAULT), H5Dclose, where + ": cannot open");
    Handle space = checked(H5Dget_space(d.get()), H5Sclose, where + ": cannot read its shape");
    return space_shape(space.get());
  } catch (const LocalError& e) {
    throw InputError(e.what());
  }
}

void Hdf5File::set_attribute(const std::string& object, const std::string& name, std::int64_t value) {
  impl_->write_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void Hdf5File::set_attribute(const std::string& object, const std::string& name, double value) {
  impl_->write_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void Hdf5File::set_attribute(const std::string& object, const std::string& name, const std::string& value) {
  // A variable-length UTF-8 string (what h5py reads back as str).
  Handle type;
  std::string error = attempt([&] {
    type = checked(H5Tcopy(H5T_C_S1), H5Tclose, impl_->path + ": cannot make a string type");
    check_status(H5Tset_size(type.get(), H5T_VARIABLE), impl_->path + ": cannot make a string type");
    check_status(H5Tset_cset(type.get(), H5T_CSET_UTF8), impl_->path + ": cannot make a string type");
  });
  agree(impl_->comm, error);
  const char* pointer = value.c_str();
  impl_->write_attribute(object, name, type.get(), type.get(), &pointer);
}

std::int64_t Hdf5File::get_int_attribute(const std::string& object, const std::string& name) const {
  std::int64_t value = 0;
  impl_->read_numeric_attribute(object, name, DType::i64, &value);
  return value;
}

double Hdf5File::get_double_attribute(const std::string& object, const std::string& name) const {
  double value = 0;
  impl_->read_numeric_attribute(object, name, DType::f64, &value);
  return value;
}

std::string Hdf5File::get_string_attribute(const std::string& object, const std::string& name) const {
  const Impl& f = *impl_;
  f.require_open("get_string_attribute");
  QuietHdf5Errors quiet;
  std::string value;
  agree(f.comm, attempt([&] {
          Handle holder;
          Handle attribute = f.open_attribute(object, name, holder);
          const std::string what = f.path + ": attribute " + name + " on " + object;
          Handle type = checked(H5Aget_type(attribute.get()), H5Tclose, what + ": cannot read its type");
          if (H5Tget_class(type.get()) != H5T_STRING) {
            fail(what + " has type " + describe_type(type.get()) + ", expected a string");
          }
          Handle space = checked(H5Aget_space(attribute.get()), H5Sclose, what + ": cannot read its shape");
          if (H5Sget_simple_extent_npoints(space.get()) != 1) {
            fail(what + " has shape " + shape_string(space_shape(space.get())) + ", expected a single string");
          }
          Handle mem = checked(H5Tcopy(H5T_C_S1), H5Tclose, what + ": cannot make a string type");
          check_status(H5Tset_cset(mem.get(), H5Tget_cset(type.get())), what + ": cannot make a string type");
          const htri_t variable = H5Tis_variable_str(type.get());
          if (variable < 0) fail_hdf5(what + ": cannot read its type");
          if (variable > 0) {
            check_status(H5Tset_size(mem.get(), H5T_VARIABLE), what + ": cannot make a string type");
            char* text = nullptr;
            check_status(H5Aread(attribute.get(), mem.get(), &text), what + ": cannot read it");
            if (text != nullptr) {
              value = text;
              H5free_memory(text);
            }
          } else {
            const std::size_t size = H5Tget_size(type.get());
            check_status(H5Tset_size(mem.get(), size), what + ": cannot make a string type");
            check_status(H5Tset_strpad(mem.get(), H5T_STR_NULLPAD), what + ": cannot make a string type");
            std::string buffer(size, '\0');
            check_status(H5Aread(attribute.get(), mem.get(), &buffer[0]), what + ": cannot read it");
            value = buffer.substr(0, buffer.find('\0'));
          }
        }));
  return value;
}

void Hdf5File::commit() {
  Impl& f = *impl_;
  f.require_writable("commit");
  QuietHdf5Errors quiet;
  // The flush and the close write HDF5's metadata from rank 0 inside
  // collectives (create()): a write that failed there would leave rank 0
  // outside them. Every object has its place in the file by now, so rank 0
  // first reserves the file's space: a full disk or a file-size limit then
  // fails here, where all ranks agree on it.
  agree(f.comm, f.rank != 0 ? std::string()
                             : attempt([&] { reserve_allocated_space(f.data_end, f.temp_path, f.path); }));
  std::string error = attempt([&] {
    if (H5Fflush(f.file, H5F_SCOPE_GLOBAL) < 0) fail_hdf5(f.path + ": cannot flush " + f.temp_path);
  });
  const herr_t closed = H5Fclose(f.file);
  f.file = -1;
  if (error.empty() && closed < 0) error = attempt([&] { fail_hdf5(f.path + ": cannot close " + f.temp_path); });
  agree(f.comm, error);

  // Rank 0 makes the data durable, then renames (atomic on POSIX).
  agree(f.comm, f.rank != 0 ? std::string() : attempt([&] {
    const int fd = ::open(f.temp_path.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    if (std::rename(f.temp_path.c_str(), f.path.c_str()) != 0) {
      fail(f.path + ": cannot rename " + f.temp_path + " onto it: " + errno_text(errno));
    }
  }));
  f.committed = true;
}

}  // namespace miniattn::io
