// The MPI backend of Comm (MpiComm) on 1 to 4 ranks: a ring shift delivers the
// predecessor's data, all-to-all routes block j to rank j, all-gather puts rank
// i's data in block i, reduce-scatter gives rank i the sum of the blocks i,
// all-reduce sums, sub-communicators are respected, and the byte counters hold
// the bytes sent to other ranks (all-to-all, all-gather and reduce-scatter
// exclude the block kept locally; all-reduce counts the buffer; nothing is
// counted on a group of one). Values are small integers, exact in float, so
// results are compared exactly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/types.hpp"
#include "mpi_test_util.hpp"

namespace miniattn {
namespace {

using mpitest::rank_in;
using mpitest::size_of;

template <class T>
View1<T> to_view(const std::vector<T>& values, const std::string& label) {
  View1<T> view(label, values.size());
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(view, host);
  return view;
}

template <class T>
std::vector<T> to_vector(const View1<T>& view) {
  auto host = Kokkos::create_mirror_view(view);
  Kokkos::deep_copy(host, view);
  return std::vector<T>(host.data(), host.data() + host.extent(0));
}

const ExchangeStats* find_stats(const Comm& comm, Exchange label) {
  const auto it = comm.stats().find(label);
  return it == comm.stats().end() ? nullptr : &it->second;
}

// Every test runs with MPI given the Views' memory directly and, as when MPI
// is not GPU-aware, staged through host buffers (parallel.gpu_aware_mpi false).
template <class Scalar, GpuAwareMpi Aware>
struct Variant {
  using T = Scalar;
  static constexpr GpuAwareMpi gpu_aware_mpi = Aware;
};

template <class V>
class CommTest : public ::testing::Test {
 protected:
  std::unique_ptr<Comm> comm = make_comm(CommBackend::mpi, MPI_COMM_WORLD, V::gpu_aware_mpi);
};
using Variants = ::testing::Types<Variant<float, GpuAwareMpi::automatic>, Variant<double, GpuAwareMpi::automatic>,
                                  Variant<float, GpuAwareMpi::no>, Variant<double, GpuAwareMpi::no>>;
TYPED_TEST_SUITE(CommTest, Variants);

TYPED_TEST(CommTest, BackendIsMpi) {
  EXPECT_EQ(this->comm->backend(), "mpi");
  const bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  if (TypeParam::gpu_aware_mpi == GpuAwareMpi::no) {
    EXPECT_TRUE(this->comm->stages_through_host());
  } else if (host_memory) {
    EXPECT_FALSE(this->comm->stages_through_host());  // host memory never needs staging
  }
}

TYPED_TEST(CommTest, RingShiftDeliversPredecessorData) {
  using T = typename TypeParam::T;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::size_t n = 37;
  std::vector<T> k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = static_cast<T>(1000 * rank + static_cast<int>(i));
    v[i] = static_cast<T>(-1000 * rank - static_cast<int>(i) - 1);
  }
  const View1<T> k_send = to_view(k, "k"), v_send = to_view(v, "v");
  const View1<T> k_recv("k_recv", n), v_recv("v_recv", n);

  // Two shifts sharing one PendingExchange (the K and V blocks of ring attention).
  PendingExchange pending;
  EXPECT_FALSE(pending.active());
  this->comm->post_shift(k_send.data(), k_recv.data(), n, next, prev, world, Exchange::ring_forward_kv, pending);
  this->comm->post_shift(v_send.data(), v_recv.data(), n, next, prev, world, Exchange::ring_forward_kv, pending);
  EXPECT_TRUE(pending.active());
  this->comm->wait(pending);
  EXPECT_FALSE(pending.active());
  this->comm->wait(pending);  // waiting again is harmless

  const std::vector<T> k_got = to_vector(k_recv), v_got = to_vector(v_recv);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(k_got[i], static_cast<T>(1000 * prev + static_cast<int>(i))) << "element " << i;
    ASSERT_EQ(v_got[i], static_cast<T>(-1000 * prev - static_cast<int>(i) - 1)) << "element " << i;
  }

  const ExchangeStats* s = find_stats(*this->comm, Exchange::ring_forward_kv);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, 2u);
  EXPECT_GE(s->seconds, 0.0);
  // On one rank the shift goes to the rank itself; the counter's treatment of
  // that case is not part of the contract tested here (ring attention never
  // shifts on one rank).
  if (size > 1) {
    EXPECT_EQ(s->bytes_sent, 2 * n * sizeof(T));
  }
}

TYPED_TEST(CommTest, RingShiftBackwardsAndRepeated) {
  using T = typename TypeParam::T;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::size_t n = 8;
  // Pass a block all the way round the ring against the usual direction: after
  // `size` hops every rank holds its own block again; after h hops, that of
  // rank (rank + h) mod size.
  std::vector<T> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<T>(100 * rank + static_cast<int>(i));
  View1<T> current = to_view(mine, "current"), other("other", n);
  for (int hop = 1; hop <= size; ++hop) {
    PendingExchange pending;
    this->comm->post_shift(current.data(), other.data(), n, prev, next, world, Exchange::ring_backward_dkdv, pending);
    this->comm->wait(pending);
    std::swap(current, other);
    const int owner = (rank + hop) % size;
    const std::vector<T> got = to_vector(current);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], static_cast<T>(100 * owner + static_cast<int>(i))) << "hop " << hop << " element " << i;
  }
  const ExchangeStats* s = find_stats(*this->comm, Exchange::ring_backward_dkdv);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, static_cast<std::uint64_t>(size));
  if (size > 1) {
    EXPECT_EQ(s->bytes_sent, static_cast<std::uint64_t>(size) * n * sizeof(T));
  }
}

TYPED_TEST(CommTest, AllToAllRoutesBlocks) {
  using T = typename TypeParam::T;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const std::size_t c = 5;
  // Block j of send, element k: 10000*rank + 100*j + k.
  std::vector<T> send(c * static_cast<std::size_t>(size));
  for (int j = 0; j < size; ++j)
    for (std::size_t k = 0; k < c; ++k)
      send[static_cast<std::size_t>(j) * c + k] = static_cast<T>(10000 * rank + 100 * j + static_cast<int>(k));
  const View1<T> send_view = to_view(send, "send");
  const View1<T> recv_view("recv", send.size());
  this->comm->alltoall(send_view.data(), recv_view.data(), c, world, Exchange::ulysses_forward_qkv);
  const std::vector<T> got = to_vector(recv_view);
  // Block i of recv came from rank i, which addressed it to this rank.
  for (int i = 0; i < size; ++i)
    for (std::size_t k = 0; k < c; ++k)
      ASSERT_EQ(got[static_cast<std::size_t>(i) * c + k],
                static_cast<T>(10000 * i + 100 * rank + static_cast<int>(k)))
          << "block " << i << " element " << k;
  const ExchangeStats* s = find_stats(*this->comm, Exchange::ulysses_forward_qkv);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, 1u);
  EXPECT_EQ(s->bytes_sent, static_cast<std::uint64_t>(size - 1) * c * sizeof(T));  // self block excluded
}

// The world rank of each rank of group. The data below is keyed on world
// ranks, so an exchange over the wrong group shows in the values.
std::vector<int> world_ranks_of(MPI_Comm group) {
  MPI_Group world_group = MPI_GROUP_NULL, local_group = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(group, &local_group);
  std::vector<int> local(static_cast<std::size_t>(size_of(group))), world(local.size());
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = static_cast<int>(i);
  MPI_Group_translate_ranks(local_group, static_cast<int>(local.size()), local.data(), world_group, world.data());
  MPI_Group_free(&local_group);
  MPI_Group_free(&world_group);
  return world;
}

// Element k of what world rank w contributes to an all-gather: 100 w + k.
template <class T>
T gathered(int world_rank, std::size_t k) {
  return static_cast<T>(100 * world_rank + static_cast<int>(k));
}

// All-gathers `count` elements per rank over group; block i of the result must
// be the contribution of the group's rank i.
template <class T>
void expect_allgather(Comm& comm, MPI_Comm group, std::size_t count, Exchange label) {
  const std::vector<int> world = world_ranks_of(group);
  const std::size_t size = world.size();
  std::vector<T> mine(count);
  for (std::size_t k = 0; k < count; ++k) mine[k] = gathered<T>(rank_in(MPI_COMM_WORLD), k);
  const View1<T> send = to_view(mine, "send");
  const View1<T> recv("recv", count * size);
  comm.allgather(send.data(), recv.data(), count, group, label);
  const std::vector<T> got = to_vector(recv);
  for (std::size_t i = 0; i < size; ++i)
    for (std::size_t k = 0; k < count; ++k)
      ASSERT_EQ(got[i * count + k], gathered<T>(world[i], k)) << to_string(label) << ": block " << i << " element " << k;
  const ExchangeStats* s = find_stats(comm, label);
  ASSERT_NE(s, nullptr) << to_string(label);
  EXPECT_EQ(s->calls, 1u) << to_string(label);
  EXPECT_EQ(s->bytes_sent, (size - 1) * count * sizeof(T)) << to_string(label);
}

// Reduce-scatters blocks of `count` elements over group; element k of block j
// of world rank w is 1000 w + 100 j + k, so the group's rank i must receive
// 1000 (sum of the group's world ranks) + size (100 i + k).
template <class T>
void expect_reduce_scatter(Comm& comm, MPI_Comm group, std::size_t count, Exchange label) {
  const std::vector<int> world = world_ranks_of(group);
  const std::size_t size = world.size();
  const int rank = rank_in(group);
  std::vector<T> blocks(count * size);
  for (std::size_t j = 0; j < size; ++j)
    for (std::size_t k = 0; k < count; ++k)
      blocks[j * count + k] = static_cast<T>(1000 * rank_in(MPI_COMM_WORLD) + 100 * static_cast<int>(j) +
                                             static_cast<int>(k));
  const View1<T> send = to_view(blocks, "send");
  const View1<T> recv("recv", count);
  comm.reduce_scatter_sum(send.data(), recv.data(), count, group, label);
  int world_sum = 0;
  for (const int w : world) world_sum += w;
  const std::vector<T> got = to_vector(recv);
  for (std::size_t k = 0; k < count; ++k)
    ASSERT_EQ(got[k], static_cast<T>(1000 * world_sum + static_cast<int>(size) * (100 * rank + static_cast<int>(k))))
        << to_string(label) << ": element " << k;
  const ExchangeStats* s = find_stats(comm, label);
  ASSERT_NE(s, nullptr) << to_string(label);
  EXPECT_EQ(s->calls, 1u) << to_string(label);
  EXPECT_EQ(s->bytes_sent, (size - 1) * count * sizeof(T)) << to_string(label);
}

TYPED_TEST(CommTest, AllgatherCollectsBlocks) {
  expect_allgather<typename TypeParam::T>(*this->comm, MPI_COMM_WORLD, 5, Exchange::allgather_forward_kv);
}

TYPED_TEST(CommTest, ReduceScatterSumsBlocks) {
  expect_reduce_scatter<typename TypeParam::T>(*this->comm, MPI_COMM_WORLD, 5, Exchange::allgather_backward_dkdv);
}

// A group of one: both are a copy, counted as a call of no bytes.
TYPED_TEST(CommTest, AllgatherAndReduceScatterOnOneRankCopy) {
  expect_allgather<typename TypeParam::T>(*this->comm, MPI_COMM_SELF, 4, Exchange::allgather_forward_kv);
  expect_reduce_scatter<typename TypeParam::T>(*this->comm, MPI_COMM_SELF, 4, Exchange::allgather_backward_dkdv);
}

TYPED_TEST(CommTest, AllreduceSums) {
  using T = typename TypeParam::T;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const std::size_t n = 11;
  std::vector<T> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(7 * rank + static_cast<int>(i));
  const View1<T> data = to_view(values, "data");
  this->comm->allreduce_sum(data, world, Exchange::gradients_replicated);
  this->comm->allreduce_sum(data, world, Exchange::gradients_replicated);  // twice: sum of sums
  const std::vector<T> got = to_vector(data);
  for (std::size_t i = 0; i < n; ++i) {
    const int once = 7 * size * (size - 1) / 2 + size * static_cast<int>(i);
    ASSERT_EQ(got[i], static_cast<T>(size * once)) << "element " << i;
  }
  const ExchangeStats* s = find_stats(*this->comm, Exchange::gradients_replicated);
  if (size == 1) {
    EXPECT_EQ(s, nullptr) << "a group of one exchanges nothing";
  } else {
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->calls, 2u);
    EXPECT_EQ(s->bytes_sent, 2 * n * sizeof(T));
  }

  // An empty buffer is not an exchange.
  this->comm->allreduce_sum(View1<T>("empty", 0), world, Exchange::gradients_wpe);
  EXPECT_EQ(find_stats(*this->comm, Exchange::gradients_wpe), nullptr);
}

TYPED_TEST(CommTest, ScalarAllreduce) {
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const double total = this->comm->allreduce_sum(static_cast<double>(rank + 1), world, Exchange::loss);
  EXPECT_EQ(total, size * (size + 1) / 2.0);
  const ExchangeStats* s = find_stats(*this->comm, Exchange::loss);
  if (size == 1) {
    EXPECT_EQ(s, nullptr);
  } else {
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->calls, 1u);
    EXPECT_EQ(s->bytes_sent, sizeof(double));
  }
}

// Exchanges stay inside the group they are given: split the world into even
// and odd ranks and reduce, shift, all-to-all, all-gather and reduce-scatter
// inside each half.
TYPED_TEST(CommTest, SubCommunicators) {
  using T = typename TypeParam::T;
  const int world_rank = rank_in(MPI_COMM_WORLD), world_size = size_of(MPI_COMM_WORLD);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  const int rank = rank_in(half), size = size_of(half);

  // Sum of the world ranks of my half.
  int expected_sum = 0;
  for (int r = world_rank % 2; r < world_size; r += 2) expected_sum += r;
  const View1<T> data = to_view(std::vector<T>(3, static_cast<T>(world_rank)), "data");
  this->comm->allreduce_sum(data, half, Exchange::gradients_tensor_parallel);
  for (const T x : to_vector(data)) EXPECT_EQ(x, static_cast<T>(expected_sum));

  // Ring shift inside the half: the predecessor in the half is world rank - 2 (cyclically).
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const View1<T> send = to_view(std::vector<T>(4, static_cast<T>(world_rank)), "send");
  const View1<T> recv("recv", 4);
  PendingExchange pending;
  this->comm->post_shift(send.data(), recv.data(), 4, next, prev, half, Exchange::rsa_forward_k, pending);
  this->comm->wait(pending);
  const int prev_world = world_rank % 2 + 2 * prev;
  for (const T x : to_vector(recv)) EXPECT_EQ(x, static_cast<T>(prev_world));

  // All-to-all inside the half: block i comes from the half's rank i.
  const std::size_t c = 2;
  std::vector<T> blocks(c * static_cast<std::size_t>(size));
  for (int j = 0; j < size; ++j)
    for (std::size_t k = 0; k < c; ++k) blocks[static_cast<std::size_t>(j) * c + k] = static_cast<T>(10 * world_rank + j);
  const View1<T> a2a_send = to_view(blocks, "a2a_send");
  const View1<T> a2a_recv("a2a_recv", blocks.size());
  this->comm->alltoall(a2a_send.data(), a2a_recv.data(), c, half, Exchange::ulysses_forward_out);
  const std::vector<T> got = to_vector(a2a_recv);
  for (int i = 0; i < size; ++i)
    for (std::size_t k = 0; k < c; ++k)
      EXPECT_EQ(got[static_cast<std::size_t>(i) * c + k], static_cast<T>(10 * (world_rank % 2 + 2 * i) + rank));
  EXPECT_EQ(find_stats(*this->comm, Exchange::ulysses_forward_out)->bytes_sent, static_cast<std::uint64_t>(size - 1) * c * sizeof(T));

  expect_allgather<T>(*this->comm, half, 3, Exchange::tensor_parallel_gather);
  expect_reduce_scatter<T>(*this->comm, half, 3, Exchange::tensor_parallel_reduce_scatter);

  MPI_Comm_free(&half);
}

TYPED_TEST(CommTest, CountersAccumulatePerLabelAndReset) {
  using T = typename TypeParam::T;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int size = size_of(world);
  const std::size_t c = 3;
  const std::size_t capacity = 2 * c * static_cast<std::size_t>(size);
  const View1<T> send("send", capacity), recv("recv", capacity);
  for (int repeat = 0; repeat < 3; ++repeat) this->comm->alltoall(send.data(), recv.data(), c, world, Exchange::ulysses_backward_dout);
  this->comm->alltoall(send.data(), recv.data(), 2 * c, world, Exchange::ulysses_backward_dqkv);
  const ExchangeStats* a = find_stats(*this->comm, Exchange::ulysses_backward_dout);
  const ExchangeStats* b = find_stats(*this->comm, Exchange::ulysses_backward_dqkv);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->calls, 3u);
  EXPECT_EQ(a->bytes_sent, 3 * static_cast<std::uint64_t>(size - 1) * c * sizeof(T));
  EXPECT_EQ(b->calls, 1u);
  EXPECT_EQ(b->bytes_sent, static_cast<std::uint64_t>(size - 1) * 2 * c * sizeof(T));
  this->comm->reset_stats();
  EXPECT_TRUE(this->comm->stats().empty());
}

TEST(MakeComm, NcclOnlyWhenBuiltIn) {
#if defined(MINIATTN_HAVE_NCCL)
  // Constructing the NCCL backend touches no GPU (groups are built on first use).
  EXPECT_EQ(make_comm(CommBackend::nccl, MPI_COMM_WORLD)->backend(), "nccl");
#else
  EXPECT_THROW(make_comm(CommBackend::nccl, MPI_COMM_WORLD), InputError);
#endif
}

}  // namespace
}  // namespace miniattn
