// Parallel HDF5 file layer: round trips with uneven row splits, scalars and
// attributes, atomic commit, and clean errors raised on every rank together.
// Runs under mpiexec with 1, 2 and 3 ranks.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "io/hdf5_file.hpp"
#include "mpi_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using miniattn::InputError;
using miniattn::io::DType;
using miniattn::io::dtype_of;
using miniattn::io::Hdf5File;
using miniattn::io::RowBlock;

using miniattn::mpitest::barrier;
using miniattn::mpitest::world_rank;
using miniattn::mpitest::world_size;

// Rows of a dataset split among ranks in proportion to per-rank weights.
RowBlock split_rows(const std::vector<std::uint64_t>& shape, const std::vector<std::uint64_t>& weights) {
  const int rank = world_rank();
  std::uint64_t total = 0;
  for (auto w : weights) total += w;
  std::uint64_t before = 0;
  for (int r = 0; r < rank; ++r) before += weights[static_cast<std::size_t>(r)];
  const std::uint64_t rows = shape.empty() ? 1 : shape[0];
  const std::uint64_t begin = rows * before / total;
  const std::uint64_t end = rows * (before + weights[static_cast<std::size_t>(rank)]) / total;
  RowBlock block;
  block.global_shape = shape;
  block.row_begin = begin;
  block.row_count = end - begin;
  return block;
}

// Split A: rank r gets a share r+1 (7 rows over 3 ranks: 1, 2, 4).
RowBlock split_a(const std::vector<std::uint64_t>& shape) {
  std::vector<std::uint64_t> weights;
  for (int r = 0; r < world_size(); ++r) weights.push_back(static_cast<std::uint64_t>(r + 1));
  return split_rows(shape, weights);
}

// Split B: different from A, and rank 1 reads nothing (7 rows over 3 ranks: 4, 0, 3).
RowBlock split_b(const std::vector<std::uint64_t>& shape) {
  std::vector<std::uint64_t> weights;
  const int size = world_size();
  for (int r = 0; r < size; ++r) weights.push_back(r == 1 ? 0 : static_cast<std::uint64_t>(size - r + 1));
  return split_rows(shape, weights);
}

// Rank `owner` holds every row, the others none.
RowBlock whole_on(const std::vector<std::uint64_t>& shape, int owner) {
  RowBlock block;
  block.global_shape = shape;
  block.row_count = world_rank() == owner ? (shape.empty() ? 1 : shape[0]) : 0;
  return block;
}

std::uint64_t element_count(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::uint64_t row_size(const std::vector<std::uint64_t>& shape) {
  return shape.empty() ? 1 : element_count(shape) / (shape[0] == 0 ? 1 : shape[0]);
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Finite values with varied exponents and signs, and full-range integers.
template <class T>
T value_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = mix(seed * 1000003ULL + i);
  if constexpr (std::is_same_v<T, std::int64_t>) {
    return static_cast<std::int64_t>(h);
  } else {
    const double unit = static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5;
    return static_cast<T>(std::ldexp(unit, static_cast<int>(h % 41) - 20));
  }
}

template <class T>
std::vector<T> global_values(std::uint64_t seed, const std::vector<std::uint64_t>& shape) {
  std::vector<T> v(element_count(shape));
  for (std::uint64_t i = 0; i < v.size(); ++i) v[i] = value_at<T>(seed, i);
  return v;
}

template <class T>
std::vector<T> rows_of(const std::vector<T>& global, const RowBlock& block) {
  const std::uint64_t rs = row_size(block.global_shape);
  return std::vector<T>(global.begin() + static_cast<std::ptrdiff_t>(block.row_begin * rs),
                        global.begin() + static_cast<std::ptrdiff_t>((block.row_begin + block.row_count) * rs));
}

template <class T>
::testing::AssertionResult bitwise_equal(const std::vector<T>& expected, const std::vector<T>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "sizes " << expected.size() << " vs " << actual.size();
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": expected " << expected[i] << ", got "
                                           << actual[i] << " (rank " << world_rank() << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
void write_values(Hdf5File& file, const std::string& name, const std::vector<T>& global, const RowBlock& block) {
  const std::vector<T> mine = rows_of(global, block);
  file.write(name, dtype_of<T>(), block, mine.data());
}

template <class T>
std::vector<T> read_values(const Hdf5File& file, const std::string& name, const RowBlock& block) {
  std::vector<T> mine(block.row_count * row_size(block.global_shape));
  file.read(name, dtype_of<T>(), block, mine.data());
  return mine;
}

// Same on every rank? (compares a hash of the text across ranks)
bool same_on_all_ranks(const std::string& text) {
  const auto h = static_cast<unsigned long long>(std::hash<std::string>{}(text));
  unsigned long long lo = 0;
  unsigned long long hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// `body` must throw InputError on every rank, with the same message there,
// containing every one of `parts`.
void expect_input_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  std::string message = "<no exception>";
  try {
    body();
    ADD_FAILURE() << "no InputError thrown; expected one mentioning " << parts.front();
  } catch (const InputError& e) {
    message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message \"" << message << "\" lacks \"" << part << "\"";
    }
  } catch (const std::exception& e) {
    message = e.what();
    ADD_FAILURE() << "expected InputError, got another exception: " << message;
  }
  EXPECT_TRUE(same_on_all_ranks(message)) << "rank " << world_rank() << " got: " << message;
}

class Hdf5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir;
    if (world_rank() == 0) {
      const char* base = std::getenv("TMPDIR");
      std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/miniattn_hdf5_XXXXXX";
      if (mkdtemp(&pattern[0]) != nullptr) dir = pattern;
    }
    int length = static_cast<int>(dir.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(static_cast<std::size_t>(length));
    MPI_Bcast(&dir[0], length, MPI_CHAR, 0, MPI_COMM_WORLD);
    ASSERT_FALSE(dir.empty()) << "mkdtemp failed";
    dir_ = dir;
  }

  void TearDown() override {
    barrier();
    if (world_rank() == 0 && !dir_.empty()) {
      std::error_code ignored;
      fs::remove_all(dir_, ignored);
    }
    barrier();
  }

  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  // Names in the test directory, as seen from this rank.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    return names;
  }

  std::string dir_;
};

template <class T>
std::string type_tag() {
  return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, double> ? "f64" : "i64";
}

const std::vector<std::vector<std::uint64_t>> kShapes = {{7}, {7, 3}, {7, 2, 5}, {301, 33}};

template <class T>
void write_all_shapes(Hdf5File& f, std::uint64_t seed) {
  for (const auto& shape : kShapes) {
    const std::string name = "/data/" + type_tag<T>() + "/rank" + std::to_string(shape.size()) + "." +
                             std::to_string(shape[0]);
    write_values(f, name, global_values<T>(seed + shape.size() + shape[0], shape), split_a(shape));
  }
}

template <class T>
void check_all_shapes(const Hdf5File& f, std::uint64_t seed) {
  for (const auto& shape : kShapes) {
    const std::string name = "/data/" + type_tag<T>() + "/rank" + std::to_string(shape.size()) + "." +
                             std::to_string(shape[0]);
    SCOPED_TRACE(name);
    const auto global = global_values<T>(seed + shape.size() + shape[0], shape);
    EXPECT_EQ(f.dataset_shape(name), shape);
    const RowBlock b = split_b(shape);
    EXPECT_TRUE(bitwise_equal(rows_of(global, b), read_values<T>(f, name, b)));
    const RowBlock all = whole_on(shape, world_size() - 1);
    EXPECT_TRUE(bitwise_equal(rows_of(global, all), read_values<T>(f, name, all)));
  }
}

TEST_F(Hdf5Test, RoundTripOfRowBlocksIsBitwiseExactForAnySplit) {
  const std::string path = file("round_trip.h5");
  const std::vector<std::uint64_t> replicated_shape = {5, 4};
  const std::vector<std::uint64_t> param_shape = {7, 3};
  {
    Hdf5File f = Hdf5File::create(path, MPI_COMM_WORLD);
    write_all_shapes<float>(f, 100);
    write_all_shapes<double>(f, 200);
    write_all_shapes<std::int64_t>(f, 300);
    // Replicated data, written by rank 0 alone.
    write_values(f, "/replicated", global_values<double>(400, replicated_shape), whole_on(replicated_shape, 0));
    // Names with dots below a group created on the way.
    write_values(f, "/params/blocks.0.ln1.weight", global_values<float>(500, param_shape), split_a(param_shape));
    write_values(f, "/params/blocks.0.ln1.bias", global_values<double>(600, param_shape), split_b(param_shape));
    f.commit();
  }

  const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
  check_all_shapes<float>(f, 100);
  check_all_shapes<double>(f, 200);
  check_all_shapes<std::int64_t>(f, 300);

  const auto replicated = global_values<double>(400, replicated_shape);
  RowBlock everything{replicated_shape, 0, replicated_shape[0]};
  EXPECT_TRUE(bitwise_equal(replicated, read_values<double>(f, "/replicated", everything)));
  EXPECT_TRUE(bitwise_equal(rows_of(replicated, split_a(replicated_shape)),
                            read_values<double>(f, "/replicated", split_a(replicated_shape))));

  // float32 read as float64 and float64 read as float32 convert exactly as C++ does.
  const auto weights = global_values<float>(500, param_shape);
  const auto biases = global_values<double>(600, param_shape);
  const RowBlock b = split_b(param_shape);
  std::vector<double> widened;
  for (float w : rows_of(weights, b)) widened.push_back(static_cast<double>(w));
  std::vector<float> narrowed;
  for (double v : rows_of(biases, b)) narrowed.push_back(static_cast<float>(v));
  EXPECT_TRUE(bitwise_equal(widened, read_values<double>(f, "/params/blocks.0.ln1.weight", b)));
  EXPECT_TRUE(bitwise_equal(narrowed, read_values<float>(f, "/params/blocks.0.ln1.bias", b)));

  EXPECT_TRUE(f.has_dataset("/params/blocks.0.ln1.weight"));
  EXPECT_TRUE(f.has_dataset("params/blocks.0.ln1.weight"));
  EXPECT_FALSE(f.has_dataset("/params"));  // a group, not a dataset
  EXPECT_FALSE(f.has_dataset("/params/blocks"));
  EXPECT_FALSE(f.has_dataset("/missing/blocks.0.ln1.weight"));
}

TEST_F(Hdf5Test, OverwritingADatasetInTheSameFileKeepsItsShape) {
  const std::string path = file("overwrite.h5");
  const std::vector<std::uint64_t> shape = {7, 3};
  {
    Hdf5File f = Hdf5File::create(path, MPI_COMM_WORLD);
    write_values(f, "/x", global_values<double>(1, shape), split_a(shape));
    write_values(f, "/x", global_values<double>(2, shape), split_b(shape));
    expect_input_error([&] { write_values(f, "/x", global_values<double>(3, {7, 4}), split_a({7, 4})); },
                       {path, "/x", "[7, 3]", "[7, 4]"});
    expect_input_error([&] { write_values(f, "/x", global_values<std::int64_t>(3, shape), split_a(shape)); },
                       {path, "/x", "float64", "int64"});
    f.commit();
  }
  const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
  EXPECT_TRUE(bitwise_equal(global_values<double>(2, shape), read_values<double>(f, "/x", whole_on(shape, world_rank()))));
}

TEST_F(Hdf5Test, ScalarsAndAttributesRoundTrip) {
  const std::string path = file("scalars.h5");
  const double loss = 2.718281828459045;
  const std::int64_t step = -9876543210123LL;
  const std::string text = "miniattn \xc3\xbc rsa/zigzag";
  {
    Hdf5File f = Hdf5File::create(path, MPI_COMM_WORLD);
    f.write("/loss", DType::f64, whole_on({}, world_size() - 1), world_rank() == world_size() - 1 ? &loss : nullptr);
    f.write("/step", DType::i64, whole_on({}, 0), world_rank() == 0 ? &step : nullptr);
    f.set_attribute("/", "seed", std::int64_t{1});
    f.set_attribute("/", "seed", std::int64_t{-1234567890123456789LL});  // replaces
    f.set_attribute("/", "lr", 3e-4);
    f.set_attribute("/", "tiny", -4.9406564584124654e-324);
    f.set_attribute("/", "strategy", text);
    f.set_attribute("/", "empty", std::string());
    f.set_attribute("/loss", "units", std::string("nats"));
    f.set_attribute("/loss", "checksum", std::int64_t{42});
    const std::vector<std::uint64_t> shape = {3};
    write_values(f, "/params/blocks.1.attn.qkv.bias", global_values<float>(7, shape), split_a(shape));
    f.set_attribute("/params/blocks.1.attn.qkv.bias", "checksum", 0.125);
    f.commit();
  }
  const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
  EXPECT_TRUE(f.dataset_shape("/loss").empty());
  double loss_back = 0;
  std::int64_t step_back = 0;
  f.read("/loss", DType::f64, RowBlock{{}, 0, 1}, &loss_back);
  EXPECT_EQ(loss_back, loss);
  float loss_f = 0;
  f.read("/loss", DType::f32, whole_on({}, 0), world_rank() == 0 ? &loss_f : nullptr);
  if (world_rank() == 0) {
    EXPECT_EQ(loss_f, static_cast<float>(loss));
  }
  f.read("/step", DType::i64, RowBlock{{}, 0, 1}, &step_back);
  EXPECT_EQ(step_back, step);

  EXPECT_EQ(f.get_int_attribute("/", "seed"), -1234567890123456789LL);
  EXPECT_EQ(f.get_double_attribute("/", "lr"), 3e-4);
  EXPECT_EQ(f.get_double_attribute("/", "tiny"), -4.9406564584124654e-324);
  EXPECT_EQ(f.get_string_attribute("/", "strategy"), text);
  EXPECT_EQ(f.get_string_attribute("/", "empty"), "");
  EXPECT_EQ(f.get_string_attribute("/loss", "units"), "nats");
  EXPECT_EQ(f.get_int_attribute("/loss", "checksum"), 42);
  EXPECT_EQ(f.get_double_attribute("/params/blocks.1.attn.qkv.bias", "checksum"), 0.125);

  expect_input_error([&] { f.get_int_attribute("/", "missing"); }, {path, "missing"});
  expect_input_error([&] { f.get_int_attribute("/nowhere", "seed"); }, {path, "/nowhere"});
  expect_input_error([&] { f.get_int_attribute("/", "lr"); }, {path, "lr", "float64"});
  expect_input_error([&] { f.get_double_attribute("/", "seed"); }, {path, "seed", "int64"});
  expect_input_error([&] { f.get_string_attribute("/", "seed"); }, {path, "seed", "string"});
  expect_input_error([&] { f.get_double_attribute("/", "strategy"); }, {path, "strategy"});
}

TEST_F(Hdf5Test, ReadsFixedLengthStringsAndNarrowIntegersFromOtherWriters) {
  const std::string path = file("foreign.h5");
  if (world_rank() == 0) {  // a serial writer, plain HDF5, like h5py with numpy bytes / int32
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, 8);
    H5Tset_strpad(str, H5T_STR_NULLPAD);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate2(file, "fixed", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char value[8] = {'a', 'b', 'c', 0, 0, 0, 0, 0};
    H5Awrite(attr, str, value);
    const hsize_t dims[1] = {4};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dset = H5Dcreate2(file, "ints", H5T_STD_I32BE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const std::int32_t ints[4] = {-1, 2, -300000, 2147483647};
    H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ints);
    H5Dclose(dset);
    H5Sclose(space);
    H5Aclose(attr);
    H5Sclose(scalar);
    H5Tclose(str);
    H5Fclose(file);
  }
  barrier();
  const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
  EXPECT_EQ(f.get_string_attribute("/", "fixed"), "abc");
  const std::vector<std::uint64_t> shape = {4};
  EXPECT_TRUE(bitwise_equal(std::vector<std::int64_t>{-1, 2, -300000, 2147483647},
                            read_values<std::int64_t>(f, "ints", whole_on(shape, world_rank()))));
  expect_input_error([&] { read_values<double>(f, "/ints", whole_on(shape, 0)); }, {path, "/ints", "int32"});
}

TEST_F(Hdf5Test, CommitPublishesTheFileAndAbandonedWritesLeaveNothing) {
  const std::string path = file("weights.h5");
  const std::vector<std::uint64_t> shape = {7};
  const auto temp_files = [&] {
    int n = 0;
    for (const auto& name : listing()) n += name.rfind("weights.h5.tmp.", 0) == 0 ? 1 : 0;
    return n;
  };
  {
    Hdf5File f = Hdf5File::create(path, MPI_COMM_WORLD);
    write_values(f, "/v", global_values<double>(1, shape), split_a(shape));
    barrier();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_EQ(temp_files(), 1);
    Hdf5File moved = std::move(f);  // ownership moves; nothing is closed or removed
    EXPECT_EQ(temp_files(), 1);
    moved.commit();
    EXPECT_TRUE(fs::exists(path));
    EXPECT_EQ(temp_files(), 0);
  }
  barrier();
  EXPECT_TRUE(fs::exists(path));

  // Abandoned new file: no file, no temporary file.
  const std::string other = file("abandoned.h5");
  {
    Hdf5File f = Hdf5File::create(other, MPI_COMM_WORLD);
    write_values(f, "/v", global_values<double>(2, shape), split_a(shape));
  }
  EXPECT_FALSE(fs::exists(other));
  EXPECT_EQ(listing(), std::vector<std::string>{"weights.h5"});

  // Abandoned rewrite (here by an exception): the existing file keeps its content.
  try {
    Hdf5File f = Hdf5File::create(path, MPI_COMM_WORLD);
    write_values(f, "/v", global_values<double>(3, shape), split_a(shape));
    throw std::runtime_error("simulated failure before commit");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"weights.h5"});
  {
    const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
    EXPECT_TRUE(bitwise_equal(rows_of(global_values<double>(1, shape), split_b(shape)), read_values<double>(f, "/v", split_b(shape))));
  }

  // Move assignment over an uncommitted file abandons that one.
  {
    Hdf5File f = Hdf5File::create(other, MPI_COMM_WORLD);
    f = Hdf5File::create(path, MPI_COMM_WORLD);
    EXPECT_EQ(temp_files(), 1);
    write_values(f, "/v", global_values<double>(4, shape), split_a(shape));
    f.commit();
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"weights.h5"});
  const Hdf5File f = Hdf5File::open_read(path, MPI_COMM_WORLD);
  EXPECT_TRUE(bitwise_equal(rows_of(global_values<double>(4, shape), split_b(shape)), read_values<double>(f, "/v", split_b(shape))));
}

TEST_F(Hdf5Test, BadFilesAndDatasetsGiveTheSameInputErrorOnEveryRankQuietly) {
  ::testing::internal::CaptureStderr();

  // Missing file.
  const std::string missing = file("missing.h5");
  expect_input_error([&] { Hdf5File::open_read(missing, MPI_COMM_WORLD); }, {missing});

  // Text file.
  const std::string text = file("notes.h5");
  if (world_rank() == 0) std::ofstream(text) << "this is not an HDF5 file\n";
  barrier();
  expect_input_error([&] { Hdf5File::open_read(text, MPI_COMM_WORLD); }, {text, "not an HDF5 file"});

  // A valid file, then a truncated copy of it.
  const std::string good = file("good.h5");
  const std::vector<std::uint64_t> shape = {7, 3};
  {
    Hdf5File f = Hdf5File::create(good, MPI_COMM_WORLD);
    write_values(f, "/x", global_values<std::int64_t>(1, shape), split_a(shape));
    write_values(f, "/y", global_values<double>(2, {7}), split_a({7}));
    write_values(f, "/big", global_values<double>(3, {4096}), split_a({4096}));
    f.commit();
  }
  const std::string truncated = file("truncated.h5");
  if (world_rank() == 0) {
    fs::copy_file(good, truncated);
    fs::resize_file(truncated, fs::file_size(good) / 2);
  }
  barrier();
  expect_input_error([&] { Hdf5File::open_read(truncated, MPI_COMM_WORLD); }, {truncated, "truncated"});

  const Hdf5File f = Hdf5File::open_read(good, MPI_COMM_WORLD);
  expect_input_error([&] { read_values<double>(f, "/params/wte", split_a(shape)); }, {good, "dataset /params/wte", "not found"});
  expect_input_error([&] { f.dataset_shape("/nope"); }, {good, "/nope"});
  expect_input_error([&] { read_values<std::int64_t>(f, "/x", split_a({8, 3})); },
                     {good, "dataset /x", "has shape [7, 3], expected [8, 3]"});
  expect_input_error([&] { read_values<std::int64_t>(f, "/x", split_a({7})); }, {good, "/x", "[7, 3]", "[7]"});
  expect_input_error([&] { read_values<double>(f, "/x", split_a(shape)); }, {good, "/x", "int64", "float64"});
  expect_input_error([&] { read_values<std::int64_t>(f, "/y", split_a({7})); }, {good, "/y", "float64", "int64"});
  // A bad block on the last rank only still fails everywhere.
  expect_input_error(
      [&] {
        RowBlock block = split_a({7});
        if (world_rank() == world_size() - 1) block.row_count += 1;
        read_values<double>(f, "/y", block);
      },
      {good, "/y", "outside"});
  // The file is still usable after all these errors.
  EXPECT_TRUE(bitwise_equal(rows_of(global_values<double>(2, {7}), split_b({7})), read_values<double>(f, "/y", split_b({7}))));

  // Creating in a directory that does not exist.
  const std::string nowhere = file("no/such/dir/out.h5");
  expect_input_error([&] { Hdf5File::create(nowhere, MPI_COMM_WORLD); }, {nowhere});

  const std::string captured = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(captured, "") << "HDF5 or MPI printed to stderr";
}

}  // namespace
