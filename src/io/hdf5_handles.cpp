// The HDF5 C-API plumbing under Hdf5File (see hdf5_handles.hpp): error
// capture, identifiers, type and shape names, row-block selections, MPI-IO
// property lists and the space reserved before a commit.
#include "io/hdf5_handles.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace miniattn::io::hdf5_detail {
namespace {

herr_t collect_innermost(unsigned n, const H5E_error2_t* err, void* client) {
  if (n == 0 && err != nullptr && err->desc != nullptr) {
    *static_cast<std::string*>(client) = err->desc;
  }
  return 0;
}

}  // namespace

std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason;
}

[[noreturn]] void fail(const std::string& message) { throw LocalError(message); }

[[noreturn]] void fail_hdf5(const std::string& message) {
  const std::string reason = hdf5_reason();
  fail(reason.empty() ? message : message + " (HDF5: " + reason + ")");
}

Handle checked(hid_t id, Handle::Closer closer, const std::string& what) {
  if (id < 0) fail_hdf5(what);
  return Handle(id, closer);
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) fail_hdf5(what);
}

// ---------------------------------------------------------------------------
// Types, names and shapes

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i == 0 ? "" : ", ") << shape[i];
  out << ']';
  if (shape.empty()) out << " (scalar)";
  return out.str();
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
  }
  return "?";
}

hid_t memory_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i64: return H5T_NATIVE_INT64;
  }
  return -1;
}

hid_t file_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::i64: return H5T_STD_I64LE;
  }
  return -1;
}

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  switch (cls) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    default: return "type class " + std::to_string(static_cast<int>(cls));
  }
}

bool convertible(hid_t stored, DType dtype) {
  const H5T_class_t cls = H5Tget_class(stored);
  return dtype == DType::i64 ? cls == H5T_INTEGER : cls == H5T_FLOAT;
}

// Whether `name` (absolute or relative to the root) names an existing object.
// Every prefix is checked first, because H5Lexists fails rather than answers
// "no" when an intermediate group is missing.
bool object_exists(hid_t file, const std::string& name) {
  std::string prefix;
  std::size_t pos = 0;
  bool any = false;
  while (pos <= name.size()) {
    std::size_t next = name.find('/', pos);
    if (next == std::string::npos) next = name.size();
    const std::string component = name.substr(pos, next - pos);
    pos = next + 1;
    if (component.empty() || component == ".") continue;
    prefix += "/" + component;
    any = true;
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  if (!any) return true;  // the root group
  const htri_t exists = H5Oexists_by_name(file, prefix.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return exists > 0;
}

bool dataset_exists(hid_t file, const std::string& name) {
  if (!object_exists(file, name)) return false;
  const hid_t object = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  if (object < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  const bool is_dataset = H5Iget_type(object) == H5I_DATASET;
  H5Oclose(object);
  return is_dataset;
}

std::vector<std::uint64_t> space_shape(hid_t space) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail_hdf5("cannot query the dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) {
    fail_hdf5("cannot query the dataspace");
  }
  return std::vector<std::uint64_t>(dims.begin(), dims.end());
}

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string errno_text(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------
// Row blocks, transfers, file space

void check_block(const std::string& where, const RowBlock& block) {
  if (block.global_shape.empty()) {
    if (block.row_begin != 0 || block.row_count > 1) {
      fail(where + ": a scalar takes row_begin 0 and row_count 0 or 1, got rows [" +
           std::to_string(block.row_begin) + ", +" + std::to_string(block.row_count) + ")");
    }
    return;
  }
  // The rows span [row_begin, row_begin + (row_count - 1) stride + 1).
  const std::uint64_t span = block.row_count == 0 ? 0 : (block.row_count - 1) * block.row_stride + 1;
  if (block.row_stride == 0 || block.row_begin > block.global_shape[0] ||
      span > block.global_shape[0] - block.row_begin) {
    fail(where + ": rows [" + std::to_string(block.row_begin) + ", " + std::to_string(block.row_begin + span) +
         ") with stride " + std::to_string(block.row_stride) + " outside shape " + shape_string(block.global_shape));
  }
  if (block.col_count > 0 && (block.global_shape.size() < 2 || block.col_begin > block.global_shape[1] ||
                              block.col_count > block.global_shape[1] - block.col_begin)) {
    fail(where + ": columns [" + std::to_string(block.col_begin) + ", " +
         std::to_string(block.col_begin + block.col_count) + ") outside shape " +
         shape_string(block.global_shape));
  }
}

Selection select_rows(const RowBlock& block) {
  Selection s;
  const std::string what = "cannot build the dataspace selection";
  if (block.global_shape.empty()) {
    s.file_space = checked(H5Screate(H5S_SCALAR), H5Sclose, what);
    s.memory_space = checked(H5Screate(H5S_SCALAR), H5Sclose, what);
    if (block.row_count == 0) {
      check_status(H5Sselect_none(s.file_space.get()), what);
      check_status(H5Sselect_none(s.memory_space.get()), what);
    }
    return s;
  }
  const std::vector<hsize_t> dims(block.global_shape.begin(), block.global_shape.end());
  const int rank = static_cast<int>(dims.size());
  s.file_space = checked(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose, what);
  std::vector<hsize_t> local = dims;
  local[0] = block.row_count;
  if (block.col_count > 0) local[1] = block.col_count;
  if (block.row_count == 0) {
    // A zero-sized memory space is not allowed in every HDF5 version; any
    // shape will do since nothing in it is selected.
    local[0] = 1;
    for (auto& d : local) d = d == 0 ? 1 : d;
    s.memory_space = checked(H5Screate_simple(rank, local.data(), nullptr), H5Sclose, what);
    check_status(H5Sselect_none(s.file_space.get()), what);
    check_status(H5Sselect_none(s.memory_space.get()), what);
    return s;
  }
  s.memory_space = checked(H5Screate_simple(rank, local.data(), nullptr), H5Sclose, what);
  std::vector<hsize_t> start(dims.size(), 0), stride(dims.size(), 1);
  start[0] = block.row_begin;
  stride[0] = block.row_stride;
  if (block.col_count > 0) start[1] = block.col_begin;
  check_status(H5Sselect_hyperslab(s.file_space.get(), H5S_SELECT_SET, start.data(), stride.data(),
                                   local.data(), nullptr),
               what);
  return s;
}

// Raw data moves independently: a rank whose write fails (disk full, quota)
// then returns at once and reaches the agree() that follows, as do the others.
// In collective mode HDF5 would leave the others inside its own collectives,
// waiting for the failed rank forever.
Handle independent_transfer() {
  Handle dxpl = checked(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "cannot create a transfer property list");
  check_status(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), "cannot request independent I/O");
  return dxpl;
}

Handle mpio_access(MPI_Comm comm) {
  Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create a file access property list");
  check_status(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "cannot select the MPI-IO driver");
  return fapl;
}

// Room for HDF5's metadata placed after the last dataset's data (attributes
// written after it; in miniattn's checkpoints the data ends the file).
constexpr haddr_t kMetadataAfterData = haddr_t(1) << 20;

// Blocks for every byte of `temp` (named `path` in messages) below
// `data_end` + kMetadataAfterData. (The end of HDF5's allocated space itself,
// H5Fget_eoa and H5Fget_filesize, is not available through the MPI-IO
// driver.) Where the file system cannot allocate ahead (EOPNOTSUPP, ENOSYS), the
// file is only extended: a file-size limit is still met here, a full disk
// possibly not. HDF5 cuts the file back to its allocated space when it closes it.
void reserve_allocated_space(haddr_t data_end, const std::string& temp, const std::string& path) {
  const int fd = ::open(temp.c_str(), O_WRONLY);
  if (fd < 0) fail(path + ": cannot open " + temp + ": " + errno_text(errno));
  const off_t size = static_cast<off_t>(data_end + kMetadataAfterData);
  int status = ::fallocate(fd, 0, 0, size);
  struct stat info {};
  if (status != 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
    status = ::fstat(fd, &info) != 0 ? -1 : info.st_size >= size ? 0 : ::ftruncate(fd, size);
  const int err = errno;
  ::close(fd);
  if (status != 0)
    fail(path + ": cannot reserve the " + std::to_string(size) + " bytes of " + temp + ": " + errno_text(err));
}

}  // namespace miniattn::io::hdf5_detail
