// Restart checkpoints: bitwise round trips (fp64, fp32, sgd), reading with
// another rank layout and another precision, clean errors on every rank for
// corrupted, foreign, truncated and mismatched files, and the review of a
// restart's deck against the checkpoint (refused and warned keys).
// Runs under mpiexec with 1, 2 and 3 ranks.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/hdf5_file.hpp"
#include "io/parameter_io.hpp"
#include "io/restart_review.hpp"
#include "model/parameter_layout.hpp"
#include "model/parameters.hpp"
#include "mpi_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using miniattn::Config;
using miniattn::index_t;
using miniattn::InputError;
using miniattn::Layout;
using miniattn::OptimizerKind;
using miniattn::ParameterBuffers;
using miniattn::ParameterInfo;
using miniattn::ParameterLayout;
using miniattn::Precision;
using miniattn::ProcessGrid;
using miniattn::PositionEncoding;
using miniattn::io::CheckpointRead;
using miniattn::io::CheckpointState;
using miniattn::io::held_config_of;
using miniattn::io::HeldConfig;
using miniattn::io::RestartReview;
using miniattn::io::review_restart;
using miniattn::io::read_checkpoint;
using miniattn::io::write_checkpoint;

using miniattn::mpitest::barrier;
using miniattn::mpitest::world_rank;
using miniattn::mpitest::world_size;

// A fresh directory made by rank 0, the same path on every rank, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string path;
    if (world_rank() == 0) {
      const char* base = std::getenv("TMPDIR");
      std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/miniattn_ckpt_XXXXXX";
      std::vector<char> buffer(pattern.begin(), pattern.end());
      buffer.push_back('\0');
      if (mkdtemp(buffer.data()) != nullptr) path = buffer.data();
    }
    int length = static_cast<int>(path.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(length));
    if (length > 0) MPI_Bcast(&path[0], length, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~TempDir() {
    barrier();
    if (world_rank() == 0 && !path_.empty()) {
      std::error_code ignored;
      fs::remove_all(path_, ignored);
    }
    barrier();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Config make_config(Layout layout, int dp, OptimizerKind optimizer = OptimizerKind::adamw) {
  Config c;
  c.model.vocab = 11;
  c.model.d_model = 8;
  c.model.heads = 2;
  c.model.ffn = 0;  // 32
  c.model.layers = 1;  // every dataset costs collectives: keep 3 ranks on 2 cores quick
  c.model.seq_len = 12;  // zigzag over up to 3 SP ranks: 6 chunks of 2
  c.model.batch = 6;
  c.parallel.layout = layout;
  c.parallel.dp = dp;
  c.train.optimizer = optimizer;
  c.train.seed = 0xfedcba9876543210ULL;  // above INT64_MAX: stored as its bit pattern
  return c;
}

// The state a run of `c` writes (a restart compares its seed with the deck's).
CheckpointState state_of(const Config& c) {
  CheckpointState state;
  state.seed = c.train.seed;
  return state;
}

// The grid, positions and parameter layout of one rank layout.
struct RankSetup {
  Config config;
  ProcessGrid grid;
  std::vector<index_t> positions;
  ParameterLayout layout;

  explicit RankSetup(const Config& c)
      : config(c),
        grid(ProcessGrid::create(MPI_COMM_WORLD, static_cast<int>(c.parallel.dp), 1, 1, 1)),
        positions(miniattn::owned_positions(c.model.seq_len, grid.sp_size, grid.sp_rank, c.parallel.layout)),
        layout(c.model, static_cast<index_t>(positions.size())) {}
  ~RankSetup() { grid.free(); }
  RankSetup(const RankSetup&) = delete;
  RankSetup& operator=(const RankSetup&) = delete;
};

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The value of global element i of parameter number `param` in buffer set
// `salt`: finite, full mantissa, varied exponents and signs.
double global_value(std::uint64_t salt, std::size_t param, std::uint64_t i) {
  const std::uint64_t h = mix(mix(salt * 7919ULL + param) + i);
  const double unit = static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5;
  return std::ldexp(unit, static_cast<int>(h % 21) - 10);
}

// Visits every local element of every parameter: (param index, local element
// pointer offset in its buffer, global element index).
void for_each_element(const RankSetup& s, const std::function<void(std::size_t, bool, index_t, std::uint64_t)>& f) {
  const auto& params = s.layout.parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    const ParameterInfo& p = params[k];
    if (!p.sharded) {
      for (index_t i = 0; i < p.local_size; ++i) f(k, false, p.offset + i, static_cast<std::uint64_t>(i));
      continue;
    }
    const index_t width = p.global_shape[1];
    for (std::size_t r = 0; r < s.positions.size(); ++r) {
      for (index_t j = 0; j < width; ++j) {
        const index_t local = p.offset + static_cast<index_t>(r) * width + j;
        f(k, true, local, static_cast<std::uint64_t>(s.positions[r] * width + j));
      }
    }
  }
}

template <class T>
ParameterBuffers<T> make_buffers(const RankSetup& s, std::uint64_t salt, const std::string& label) {
  ParameterBuffers<T> b(s.layout, label);
  auto rep = Kokkos::create_mirror_view(b.replicated);
  auto sh = Kokkos::create_mirror_view(b.sharded);
  for_each_element(s, [&](std::size_t k, bool sharded, index_t local, std::uint64_t global) {
    const T v = static_cast<T>(global_value(salt, k, global));
    (sharded ? sh : rep)(local) = v;
  });
  Kokkos::deep_copy(b.replicated, rep);
  Kokkos::deep_copy(b.sharded, sh);
  return b;
}

// Number of elements, over all ranks, that differ bitwise from the values of
// `salt` stored as Stored and read as T.
template <class Stored, class T>
long long global_mismatches(const RankSetup& s, const ParameterBuffers<T>& b, std::uint64_t salt) {
  auto rep = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.replicated);
  auto sh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.sharded);
  long long bad = 0;
  for_each_element(s, [&](std::size_t k, bool sharded, index_t local, std::uint64_t global) {
    const T expected = static_cast<T>(static_cast<Stored>(global_value(salt, k, global)));
    const T got = (sharded ? sh : rep)(local);
    if (std::memcmp(&expected, &got, sizeof(T)) != 0) ++bad;
  });
  long long total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Runs `body`, expecting an InputError on this rank whose message contains
// every one of `parts`; the outcome must be the same on every rank.
void expect_input_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  std::string message;
  bool threw = false;
  try {
    body();
  } catch (const InputError& e) {
    threw = true;
    message = e.what();
  }
  EXPECT_TRUE(threw) << "rank " << world_rank() << ": no InputError";
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "rank " << world_rank() << ": message \"" << message
                                                     << "\" lacks \"" << part << "\"";
  }
  int mine = threw ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, world_size());
}

// Writes a checkpoint of salts 1 (params), 2 (m), 3 (v) as W from `writer`,
// reads it back as T with each of `readers` and checks every element bitwise
// and the state.
bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

template <class W, class T>
void round_trip(const Config& writer_config, const std::vector<Config>& readers, bool moments) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  CheckpointState state = state_of(writer_config);
  state.step = 17;
  state.optimizer_steps = 16;
  {
    RankSetup w(writer_config);
    auto params = make_buffers<W>(w, 1, "p");
    auto m = make_buffers<W>(w, 2, "m");
    auto v = make_buffers<W>(w, 3, "v");
    write_checkpoint<W>(path, w.config, w.layout, w.grid, w.positions, params, moments ? &m : nullptr,
                        moments ? &v : nullptr, state);
  }
  if (world_rank() == 0) {
    EXPECT_TRUE(fs::exists(path));
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      EXPECT_EQ(entry.path().filename().string(), "ckpt.h5") << "left behind: " << entry.path();
    }
  }
  for (const Config& reader_config : readers) {
    SCOPED_TRACE("read with dp=" + std::to_string(reader_config.parallel.dp) + " " +
                 miniattn::to_string(reader_config.parallel.layout));
    RankSetup r(reader_config);
    ParameterBuffers<T> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
    params.fill(T(-1));
    m.fill(T(-1));
    v.fill(T(-1));
    const CheckpointRead got = read_checkpoint<T>(path, r.config, r.layout, r.grid, r.positions, params,
                                                  moments ? &m : nullptr, moments ? &v : nullptr);
    EXPECT_EQ(got.step, state.step);
    EXPECT_EQ(got.optimizer_steps, state.optimizer_steps);
    EXPECT_EQ(got.seed, state.seed);
    // Another layout is the same run; another precision too, but said (its rounding changes).
    if (reader_config.model.precision == writer_config.model.precision) {
      EXPECT_TRUE(got.warnings.empty()) << got.warnings.front();
    } else {
      ASSERT_EQ(got.warnings.size(), 1u);
      EXPECT_TRUE(starts_with(got.warnings[0], "model.precision: checkpoint " + path + " holds ")) << got.warnings[0];
    }
    EXPECT_EQ((global_mismatches<W, T>(r, params, 1)), 0);
    if (moments) {
      EXPECT_EQ((global_mismatches<W, T>(r, m, 2)), 0);
      EXPECT_EQ((global_mismatches<W, T>(r, v, 3)), 0);
    }
  }
}

TEST(Checkpoint, RoundTripFp64) {
  const Config c = make_config(Layout::contiguous, 1);
  round_trip<double, double>(c, {c}, true);
}

TEST(Checkpoint, RoundTripFp32) {
  Config c = make_config(Layout::zigzag, world_size());
  c.model.precision = Precision::fp32;
  round_trip<float, float>(c, {c}, true);
}

TEST(Checkpoint, RoundTripSgdWithoutMoments) {
  const Config c = make_config(Layout::zigzag, 1, OptimizerKind::sgd);
  round_trip<double, double>(c, {c}, false);
}

// Written by one dp x sp / contiguous|zigzag layout, read by others (with one
// rank, only the position layout changes).
TEST(Checkpoint, ReadWithAnotherRankLayout) {
  const int n = world_size();
  round_trip<double, double>(make_config(Layout::zigzag, 1),
                             {make_config(Layout::contiguous, n), make_config(Layout::contiguous, 1),
                              make_config(Layout::zigzag, n)},
                             true);
  round_trip<double, double>(make_config(Layout::contiguous, n), {make_config(Layout::zigzag, 1)}, true);
}

TEST(Checkpoint, Fp64FileIntoFp32RunAndBack) {
  const int n = world_size();
  Config c64 = make_config(Layout::zigzag, 1);
  Config c32 = make_config(Layout::contiguous, n);
  c32.model.precision = Precision::fp32;
  round_trip<double, float>(c64, {c32}, true);
  round_trip<float, double>(c32, {c64}, true);
}

// Offset in the file of a contiguous dataset's data (rank 0, serial HDF5).
std::uint64_t dataset_offset(const std::string& path, const std::string& dataset) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0);
  const hid_t d = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0);
  const haddr_t offset = H5Dget_offset(d);
  EXPECT_NE(offset, HADDR_UNDEF);
  H5Dclose(d);
  H5Fclose(file);
  return static_cast<std::uint64_t>(offset);
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good());
}

// One byte flipped in a replicated tensor, in the sharded wpe (checksummed in
// pieces) and in a moment, one at a time, read back by two rank layouts.
TEST(Checkpoint, CorruptedByteIsAChecksumMismatchNamingTheDataset) {
  const int n = world_size();
  const Config c = make_config(Layout::zigzag, 1);
  const Config reader = make_config(Layout::contiguous, n);
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  {
    RankSetup w(c);
    auto params = make_buffers<double>(w, 1, "p");
    auto m = make_buffers<double>(w, 2, "m");
    auto v = make_buffers<double>(w, 3, "v");
    write_checkpoint<double>(path, w.config, w.layout, w.grid, w.positions, params, &m, &v, state_of(c));
  }
  const std::vector<std::string> datasets = {"/params/blocks.0.ffn.fc1.weight", "/params/wpe", "/optim/m/wte"};
  for (std::size_t k = 0; k < datasets.size(); ++k) {
    const std::string& dataset = datasets[k];
    SCOPED_TRACE(dataset);
    std::uint64_t offset = 0;
    if (world_rank() == 0) {
      offset = dataset_offset(path, dataset) + 8 * 13 + 3;
      flip_byte(path, offset);
    }
    barrier();
    RankSetup r(k % 2 == 0 ? reader : c);
    ParameterBuffers<float> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
    expect_input_error([&] { read_checkpoint<float>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v); },
                       {path, "dataset " + dataset + ": checksum mismatch (stored 0x", ", computed 0x"});
    if (world_rank() == 0) flip_byte(path, offset);  // repaired for the next one
    barrier();
  }
  // Repaired, the file reads again.
  RankSetup r(reader);
  ParameterBuffers<float> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
  read_checkpoint<float>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v);
  EXPECT_EQ((global_mismatches<double, float>(r, m, 2)), 0);
}

// ---------------------------------------------------------------------------
// A restart's deck against the checkpoint (review_restart): the function alone.


// The review of a restart under `deck` from a checkpoint written under `held`.
RestartReview review(const Config& held, const Config& deck) {
  return review_restart(held_config_of(held), deck, "ck.h5");
}

std::string definition_refusal(const std::string& key, const std::string& held, const std::string& deck) {
  return key + ": checkpoint ck.h5 holds " + held + ", the deck says " + deck +
         " (a restart continues the run; start a new run with io.init to change the model's definition)";
}

TEST(RestartReview, TheSameRunIsTakenSilently) {
  const Config c = make_config(Layout::contiguous, 1);
  Config other = c;  // what a restart may change freely: procedure, decomposition
  other.train.lr = 3e-4;
  other.train.steps = 99;
  other.train.weight_decay = 0.5;
  other.train.grad_clip = 0;
  other.train.micro_batches = 2;
  other.kernels.attention = miniattn::AttentionKernel::gemm;
  other.kernels.cudnn_workspace_mib = 64;
  other.parallel.layout = Layout::zigzag;
  other.parallel.dp = 3;
  other.parallel.strategy = miniattn::Strategy::ring;
  other.model.rope_theta = 500000;  // unused by learned positions
  const RestartReview r = review(c, other);
  EXPECT_EQ(r.refusal, "");
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
}

TEST(RestartReview, ADefinitionChangeIsRefusedNamingKeyAndBothValues) {
  const Config c = make_config(Layout::contiguous, 1);
  Config rope = c;
  rope.model.positions = PositionEncoding::rope;
  EXPECT_EQ(review(c, rope).refusal, definition_refusal("model.positions", "learned", "rope"));
  EXPECT_EQ(review(rope, c).refusal, definition_refusal("model.positions", "rope", "learned"));
  Config other = c;
  other.model.causal = false;
  EXPECT_EQ(review(c, other).refusal, definition_refusal("model.causal", "true", "false"));
  other = c;
  other.model.window = 5;
  EXPECT_EQ(review(c, other).refusal, definition_refusal("model.window", "0", "5"));
  other = c;
  other.model.kv_heads = 1;  // resolved: 0 means heads (2)
  EXPECT_EQ(review(c, other).refusal, definition_refusal("model.kv_heads", "2", "1"));
  other.model.kv_heads = 2;
  EXPECT_EQ(review(c, other).refusal, "");
  other = c;
  other.model.heads = 4;
  EXPECT_EQ(review(c, other).refusal, definition_refusal("model.heads", "2", "4"));
  other = c;
  other.train.seed = 1;
  EXPECT_EQ(review(c, other).refusal, "train.seed: checkpoint ck.h5 holds 18364758544493064720, the deck says 1 "
                                      "(a restart continues the run and its data stream; start a new run with "
                                      "io.init to change the seed)");
  // Several changes: the first key of the table is named, deliberate ones do not hide it.
  other = rope;
  other.model.layers = 3;
  other.data.documents = true;
  EXPECT_EQ(review(c, other).refusal, definition_refusal("model.layers", "1", "3"));
}

TEST(RestartReview, DeliberateChangesWarnOncePerKey) {
  Config c = make_config(Layout::contiguous, 1);
  c.model.positions = PositionEncoding::rope;
  Config other = c;
  other.model.rope_theta = 500000;
  RestartReview r = review(c, other);
  EXPECT_EQ(r.refusal, "");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "model.rope_theta: checkpoint ck.h5 holds 10000, the deck says 500000 (continuing with "
                           "500000: the rotary angles change from this step on, as in a context extension)");
  other.data.documents = true;
  other.data.task = miniattn::DataTask::lookup;
  other.model.batch = 12;
  other.train.optimizer = OptimizerKind::sgd;
  r = review(c, other);
  EXPECT_EQ(r.refusal, "");
  ASSERT_EQ(r.warnings.size(), 5u);  // one per key, in the table's order
  const std::vector<std::string> keys = {"model.rope_theta", "model.batch", "train.optimizer", "data.documents",
                                         "data.task"};
  for (std::size_t i = 0; i < keys.size(); ++i)
    EXPECT_TRUE(starts_with(r.warnings[i], keys[i] + ": ")) << r.warnings[i];
  EXPECT_EQ(r.warnings[2], "train.optimizer: checkpoint ck.h5 holds adamw, the deck says sgd (continuing with sgd, "
                           "which keeps no state: the checkpoint's adamw moments are not read; the step count goes "
                           "on)");
  EXPECT_EQ(r.warnings[3], "data.documents: checkpoint ck.h5 holds false, the deck says true (from this step on a "
                           "sample packs several documents and attention stays within each)");
}

// Changes that keep the run but not its rounding or its repeats, and AdamW's
// constants, which the saved moments were accumulated with (sgd keeps none).
TEST(RestartReview, PrecisionDeterminismAndAdamwConstantsWarn) {
  const Config c = make_config(Layout::contiguous, 1);
  Config other = c;
  other.model.precision = Precision::bf16;
  other.kernels.deterministic = false;
  other.train.beta1 = 0.8;
  other.train.beta2 = 0.95;
  other.train.eps = 1e-6;
  const RestartReview r = review(c, other);
  EXPECT_EQ(r.refusal, "");
  ASSERT_EQ(r.warnings.size(), 5u);
  EXPECT_EQ(r.warnings[0], "model.precision: checkpoint ck.h5 holds fp64, the deck says bf16 (continuing in bf16: "
                           "the stored parameters and moments are read as they are, and the step rounds as bf16 "
                           "does from this step on)");
  EXPECT_EQ(r.warnings[1], "kernels.deterministic: checkpoint ck.h5 holds true, the deck says false (cuDNN's "
                           "non-deterministic backward from this step on: repeats may differ in the last bits)");
  EXPECT_EQ(r.warnings[2], "train.beta1: checkpoint ck.h5 holds 0.9, the deck says 0.8 (continuing with 0.8: the "
                           "checkpoint's AdamW moments were accumulated with 0.9)");
  EXPECT_TRUE(starts_with(r.warnings[3], "train.beta2: checkpoint ck.h5 holds 0.999, the deck says 0.95 ("));
  EXPECT_TRUE(starts_with(r.warnings[4], "train.eps: checkpoint ck.h5 holds 1e-08, the deck says 1e-06 ("));
  Config sgd = make_config(Layout::contiguous, 1, OptimizerKind::sgd), sgd_other = sgd;
  sgd_other.train.beta1 = 0.5;
  EXPECT_TRUE(review(sgd, sgd_other).warnings.empty());
}

// AdamW continues from its moments and step count; an sgd checkpoint has none.
TEST(RestartReview, AdamwFromAnSgdCheckpointIsRefused) {
  const Config sgd = make_config(Layout::contiguous, 1, OptimizerKind::sgd);
  const RestartReview r = review(sgd, make_config(Layout::contiguous, 1, OptimizerKind::adamw));
  EXPECT_EQ(r.refusal, "train.optimizer: checkpoint ck.h5 holds sgd, the deck says adamw (the checkpoint holds no "
                       "adamw moments to continue from; start a new run with io.init to change the optimizer)");
}

TEST(RestartReview, KeysAnOldFileLacksAreNamedInOneWarning) {
  const Config c = make_config(Layout::contiguous, 1);
  HeldConfig held = held_config_of(c);
  held.erase("model.kv_heads");
  held.erase("data.task");
  Config other = c;
  other.model.kv_heads = 1;  // cannot be checked: taken (the datasets' shapes still are)
  const RestartReview r = review_restart(held, other, "old.h5");
  EXPECT_EQ(r.refusal, "");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "io.restart: old.h5 was written before checkpoints held model.kv_heads, data.task: a "
                           "change of these keys could not be checked");
}

// ---------------------------------------------------------------------------
// The review inside read_checkpoint.

// Runs `body`, expecting RestartRefused with exactly `message` on every rank.
void expect_restart_refused(const std::function<void()>& body, const std::string& message) {
  std::string got = "(nothing thrown)";
  try {
    body();
  } catch (const miniattn::io::RestartRefused& e) {
    got = e.what();
  } catch (const std::exception& e) {
    got = std::string("another error: ") + e.what();
  }
  EXPECT_EQ(got, message) << "rank " << world_rank();
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(Checkpoint, DefinitionChangeIsRefusedBeforeReadingAndLeavesTheFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  const Config c = make_config(Layout::contiguous, 1);
  {
    RankSetup w(c);
    auto params = make_buffers<double>(w, 1, "p");
    write_checkpoint<double>(path, w.config, w.layout, w.grid, w.positions, params, nullptr, nullptr, state_of(c));
  }
  const std::vector<char> before = world_rank() == 0 ? file_bytes(path) : std::vector<char>{};
  const auto expect_refused = [&](const Config& deck, const std::string& key, const std::string& held,
                                  const std::string& says) {
    RankSetup r(deck);
    ParameterBuffers<double> params(r.layout, "p");
    expect_restart_refused(
        [&] { read_checkpoint<double>(path, r.config, r.layout, r.grid, r.positions, params, nullptr, nullptr); },
        key + ": checkpoint " + path + " holds " + held + ", the deck says " + says +
            " (a restart continues the run; start a new run with io.init to change the model's definition)");
  };
  Config other = c;
  other.model.positions = PositionEncoding::rope;  // no wpe: the layout alone would not notice
  expect_refused(other, "model.positions", "learned", "rope");
  other = c;
  other.model.causal = false;
  expect_refused(other, "model.causal", "true", "false");
  other = c;
  other.model.window = 4;
  expect_refused(other, "model.window", "0", "4");
  other = c;
  other.model.d_model = 16;
  expect_refused(other, "model.d_model", "8", "16");
  other = c;
  other.model.ffn = 24;
  expect_refused(other, "model.ffn", "32", "24");
  other = c;
  other.model.seq_len = 24;
  expect_refused(other, "model.seq_len", "12", "24");
  other = c;
  other.model.vocab = 13;
  expect_refused(other, "model.vocab", "11", "13");
  other = c;
  other.model.heads = 4;  // the same parameter shapes, another function
  expect_refused(other, "model.heads", "2", "4");
  if (world_rank() == 0) {
    EXPECT_TRUE(file_bytes(path) == before);
  }
}

// Removes attributes on "/" (rank 0, serial HDF5), as a file written before they existed.
void remove_root_attributes(const std::string& path, const std::vector<std::string>& names) {
  if (world_rank() == 0) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file, 0);
    const hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
    for (const std::string& name : names) EXPECT_GE(H5Adelete(root, name.c_str()), 0) << name;
    H5Gclose(root);
    H5Fclose(file);
  }
  barrier();
}

// Writes a string attribute on "/" (rank 0, serial HDF5), as an older miniattn did.
void write_root_string_attribute(const std::string& path, const std::string& name, const std::string& value) {
  if (world_rank() == 0) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file, 0);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size());
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attribute = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(attribute, type, value.data()), 0);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
  }
  barrier();
}

// A checkpoint of `c` with AdamW moments, the parameters in T.
template <class T>
void write_adamw_checkpoint(const std::string& path, const Config& c) {
  RankSetup w(c);
  auto params = make_buffers<T>(w, 1, "p");
  auto m = make_buffers<T>(w, 2, "m");
  auto v = make_buffers<T>(w, 3, "v");
  write_checkpoint<T>(path, w.config, w.layout, w.grid, w.positions, params, &m, &v, state_of(c));
}

TEST(Checkpoint, DeliberateChangesAndOldFilesComeBackAsWarnings) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  Config c = make_config(Layout::contiguous, 1);
  c.model.positions = PositionEncoding::rope;
  write_adamw_checkpoint<double>(path, c);
  Config deck = c;
  deck.model.rope_theta = 1e6;
  {
    RankSetup r(deck);
    ParameterBuffers<double> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
    const CheckpointRead got = read_checkpoint<double>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v);
    ASSERT_EQ(got.warnings.size(), 1u);
    EXPECT_TRUE(starts_with(got.warnings[0], "model.rope_theta: checkpoint " + path +
                                                 " holds 10000, the deck says 1000000 ("))
        << got.warnings[0];
    EXPECT_EQ((global_mismatches<double, double>(r, params, 1)), 0);
  }
  // A file from before kv_heads and positions were stored: read, with one warning naming them.
  remove_root_attributes(path, {"kv_heads", "positions"});
  RankSetup r(c);
  ParameterBuffers<double> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
  const CheckpointRead got = read_checkpoint<double>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v);
  ASSERT_EQ(got.warnings.size(), 1u);
  EXPECT_EQ(got.warnings[0], "io.restart: " + path + " was written before checkpoints held model.kv_heads, "
                             "model.positions: a change of these keys could not be checked");
}

// A bf16 run's checkpoint says bf16 (model.precision) and stores fp32
// (parameter_type); a file from before parameter_type held the stored type
// in "precision", which is then not read as the run's precision.
TEST(Checkpoint, PrecisionIsTheRunsAndParameterTypeTheStoredOnes) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  Config c = make_config(Layout::contiguous, 1);
  c.model.precision = Precision::bf16;
  write_adamw_checkpoint<float>(path, c);
  {
    const miniattn::io::Hdf5File file = miniattn::io::Hdf5File::open_read(path, MPI_COMM_WORLD);
    EXPECT_EQ(file.get_string_attribute("/", "precision"), "bf16");
    EXPECT_EQ(file.get_string_attribute("/", "parameter_type"), "fp32");
  }
  Config fp32 = c;
  fp32.model.precision = Precision::fp32;
  RankSetup r(fp32);
  ParameterBuffers<float> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
  CheckpointRead got = read_checkpoint<float>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v);
  ASSERT_EQ(got.warnings.size(), 1u);
  EXPECT_TRUE(starts_with(got.warnings[0], "model.precision: checkpoint " + path + " holds bf16, the deck says fp32"));
  // As written before parameter_type: "precision" is the stored type, the run's is unknown.
  remove_root_attributes(path, {"parameter_type", "precision"});
  write_root_string_attribute(path, "precision", "fp32");
  got = read_checkpoint<float>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v);
  ASSERT_EQ(got.warnings.size(), 1u);
  EXPECT_EQ(got.warnings[0], "io.restart: " + path + " was written before checkpoints held model.precision: a change "
                             "of these keys could not be checked");
  EXPECT_EQ((global_mismatches<float, float>(r, params, 1)), 0);
}

TEST(Checkpoint, SgdCheckpointIntoAdamwRunIsRefused) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  const Config c = make_config(Layout::contiguous, 1, OptimizerKind::sgd);
  {
    RankSetup w(c);
    auto params = make_buffers<double>(w, 1, "p");
    write_checkpoint<double>(path, w.config, w.layout, w.grid, w.positions, params, nullptr, nullptr, state_of(c));
  }
  RankSetup r(make_config(Layout::contiguous, 1, OptimizerKind::adamw));
  ParameterBuffers<double> params(r.layout, "p"), m(r.layout, "m"), v(r.layout, "v");
  const auto read = [&] { read_checkpoint<double>(path, r.config, r.layout, r.grid, r.positions, params, &m, &v); };
  expect_restart_refused(read, "train.optimizer: checkpoint " + path + " holds sgd, the deck says adamw (the "
                               "checkpoint holds no adamw moments to continue from; start a new run with io.init "
                               "to change the optimizer)");
  // A file from before the optimizer was stored: the missing moments still say why.
  remove_root_attributes(path, {"optimizer"});
  expect_input_error(read, {path + ": dataset /optim/m/wte not found", "adamw"});
}

TEST(Checkpoint, FileThatIsNotACheckpoint) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("weights.h5");
  RankSetup s(make_config(Layout::contiguous, 1));
  auto params = make_buffers<double>(s, 1, "p");
  {
    // Parameters and config, as an init file has them, but no step.
    auto file = miniattn::io::Hdf5File::create(path, MPI_COMM_WORLD);
    miniattn::io::write_config_attributes(file, s.config, world_size());
    miniattn::io::write_parameter_group(file, "/params", s.layout, s.grid, s.positions, s.config.parallel.layout,
                                        params);
    file.commit();
  }
  expect_input_error(
      [&] { read_checkpoint<double>(path, s.config, s.layout, s.grid, s.positions, params, nullptr, nullptr); },
      {path + ": not a miniattn checkpoint", "step"});
}

TEST(Checkpoint, TruncatedFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("ckpt.h5");
  RankSetup s(make_config(Layout::contiguous, 1));
  auto params = make_buffers<double>(s, 1, "p");
  write_checkpoint<double>(path, s.config, s.layout, s.grid, s.positions, params, nullptr, nullptr,
                           state_of(s.config));
  if (world_rank() == 0) fs::resize_file(path, fs::file_size(path) / 2);
  barrier();
  expect_input_error(
      [&] { read_checkpoint<double>(path, s.config, s.layout, s.grid, s.positions, params, nullptr, nullptr); },
      {path});
}

TEST(Checkpoint, CrcIsZlibCrc32) {
  // The standard CRC-32 check value, fed in two pieces.
  const char* text = "123456789";
  const std::uint32_t crc = miniattn::io::crc32_update(miniattn::io::crc32_update(0, text, 4), text + 4, 5);
  EXPECT_EQ(crc, 0xcbf43926u);
}

}  // namespace
