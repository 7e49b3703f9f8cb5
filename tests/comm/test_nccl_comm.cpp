// The NCCL backend (NcclComm) against the MPI backend (MpiComm): ring shifts,
// all-to-all, all-gather, reduce-scatter and all-reduce give the same results
// and the same byte counters.
// Needs one GPU per rank (registered on 2 ranks when MINIATTN_ENABLE_NCCL is
// on); skips, on every rank alike, when the build has no NCCL backend, when a
// rank sees no CUDA device, or when two ranks of one host share a device.
//
// NCCL works on cudaMalloc'ed buffers and MPI on host buffers holding the same
// values, so the comparison needs neither GPU-aware MPI nor a Kokkos CUDA build
// (all-reduce wraps the raw pointers in unmanaged Views, which it never reads).
// Values are small integers, exact in float, and are compared exactly.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/types.hpp"
#include "mpi_test_util.hpp"

#if defined(MINIATTN_HAVE_NCCL) || defined(MINIATTN_NCCL_CHECK_BUILD)
#define MINIATTN_TEST_NCCL 1
#include <cuda_runtime.h>

#include "comm/nccl_comm.hpp"
#endif

namespace miniattn {
namespace {

using mpitest::rank_in;
using mpitest::size_of;

#if defined(MINIATTN_TEST_NCCL)

// Why this run cannot test NCCL ("" when it can); the same answer on every rank.
std::string skip_reason() {
  int devices = 0, device = -1;
  std::string local;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    local = "no CUDA device";
  } else if (cudaGetDevice(&device) != cudaSuccess) {
    local = "cudaGetDevice failed";
  }
  // Every rank's (host, device), to find ranks sharing a GPU.
  struct Place {
    char host[64];
    int device;
  } mine{};
  gethostname(mine.host, sizeof(mine.host) - 1);
  mine.device = device;
  const int size = size_of(MPI_COMM_WORLD);
  std::vector<Place> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, sizeof(Place), MPI_BYTE, all.data(), sizeof(Place), MPI_BYTE, MPI_COMM_WORLD);
  for (int a = 0; a < size && local.empty(); ++a)
    for (int b = a + 1; b < size && local.empty(); ++b)
      if (all[a].device >= 0 && all[a].device == all[b].device && std::strcmp(all[a].host, all[b].host) == 0)
        local = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " share GPU " +
                std::to_string(all[a].device) + " on " + all[a].host +
                "; NCCL needs one GPU per rank (--kokkos-map-device-id-by=mpi_rank)";
  int any = local.empty() ? 0 : 1, skip = 0;
  MPI_Allreduce(&any, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!skip) return "";
  return local.empty() ? std::string("another rank cannot run NCCL") : local;
}

void check(cudaError_t result, const char* what) {
  ASSERT_EQ(result, cudaSuccess) << what << ": " << cudaGetErrorString(result);
}

// A device copy of a host vector.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& values) : n_(values.size()) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(n_, 1) * sizeof(T)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
    if (n_ > 0 && cudaMemcpy(ptr_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* data() const { return ptr_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    if (n_ > 0 && cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the host failed");
    return host;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
class NcclVsMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    mpi = std::make_unique<MpiComm>();
    nccl = std::make_unique<NcclComm>();
  }
  void TearDown() override {
    if (nccl) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void expect_same_counters(Exchange label) const {
    ASSERT_EQ(mpi->stats().count(label), nccl->stats().count(label)) << to_string(label);
    if (mpi->stats().count(label) == 0) return;
    EXPECT_EQ(mpi->stats().at(label).bytes_sent, nccl->stats().at(label).bytes_sent) << to_string(label);
    EXPECT_EQ(mpi->stats().at(label).calls, nccl->stats().at(label).calls) << to_string(label);
  }
  std::unique_ptr<MpiComm> mpi;
  std::unique_ptr<NcclComm> nccl;
};
using ScalarTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(NcclVsMpi, ScalarTypes);

TYPED_TEST(NcclVsMpi, RingShift) {
  using T = TypeParam;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::size_t n = 1000;
  std::vector<T> k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = static_cast<T>(1000 * rank + static_cast<int>(i));
    v[i] = static_cast<T>(-3 * rank - static_cast<int>(i));
  }
  // MPI on host buffers.
  std::vector<T> k_mpi(n), v_mpi(n);
  PendingExchange mpi_pending;
  this->mpi->post_shift(k.data(), k_mpi.data(), n, next, prev, world, Exchange::ring_forward_kv, mpi_pending);
  this->mpi->post_shift(v.data(), v_mpi.data(), n, next, prev, world, Exchange::ring_forward_kv, mpi_pending);
  this->mpi->wait(mpi_pending);
  // NCCL on device buffers: two posts before one wait, like ring attention.
  const DeviceBuffer<T> k_send(k), v_send(v), k_recv{std::vector<T>(n)}, v_recv{std::vector<T>(n)};
  PendingExchange pending;
  this->nccl->post_shift(k_send.data(), k_recv.data(), n, next, prev, world, Exchange::ring_forward_kv, pending);
  this->nccl->post_shift(v_send.data(), v_recv.data(), n, next, prev, world, Exchange::ring_forward_kv, pending);
  EXPECT_TRUE(pending.active());
  EXPECT_TRUE(pending.requests.empty());
  this->nccl->wait(pending);
  EXPECT_FALSE(pending.active());

  EXPECT_EQ(k_recv.to_host(), k_mpi);
  EXPECT_EQ(v_recv.to_host(), v_mpi);
  EXPECT_EQ(k_mpi[1], static_cast<T>(1000 * prev + 1));
  this->expect_same_counters(Exchange::ring_forward_kv);
}

TYPED_TEST(NcclVsMpi, AllToAll) {
  using T = TypeParam;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const std::size_t c = 257;
  std::vector<T> send(c * static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>(10000 * rank + static_cast<int>(i));
  std::vector<T> recv_mpi(send.size());
  this->mpi->alltoall(send.data(), recv_mpi.data(), c, world, Exchange::ulysses_forward_qkv);
  const DeviceBuffer<T> send_dev(send), recv_dev{std::vector<T>(send.size())};
  this->nccl->alltoall(send_dev.data(), recv_dev.data(), c, world, Exchange::ulysses_forward_qkv);
  EXPECT_EQ(recv_dev.to_host(), recv_mpi);
  this->expect_same_counters(Exchange::ulysses_forward_qkv);
}

TYPED_TEST(NcclVsMpi, AllGather) {
  using T = TypeParam;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const std::size_t c = 257;
  std::vector<T> send(c);
  for (std::size_t i = 0; i < c; ++i) send[i] = static_cast<T>(10000 * rank + static_cast<int>(i));
  std::vector<T> recv_mpi(c * static_cast<std::size_t>(size));
  this->mpi->allgather(send.data(), recv_mpi.data(), c, world, Exchange::allgather_forward_kv);
  const DeviceBuffer<T> send_dev(send), recv_dev{std::vector<T>(recv_mpi.size())};
  this->nccl->allgather(send_dev.data(), recv_dev.data(), c, world, Exchange::allgather_forward_kv);
  EXPECT_EQ(recv_dev.to_host(), recv_mpi);
  this->expect_same_counters(Exchange::allgather_forward_kv);
}

TYPED_TEST(NcclVsMpi, ReduceScatterSum) {
  using T = TypeParam;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world), size = size_of(world);
  const std::size_t c = 257;
  std::vector<T> send(c * static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>(rank + static_cast<int>(i % 1000));
  std::vector<T> recv_mpi(c);
  this->mpi->reduce_scatter_sum(send.data(), recv_mpi.data(), c, world, Exchange::allgather_backward_dkdv);
  const DeviceBuffer<T> send_dev(send), recv_dev{std::vector<T>(c)};
  this->nccl->reduce_scatter_sum(send_dev.data(), recv_dev.data(), c, world, Exchange::allgather_backward_dkdv);
  EXPECT_EQ(recv_dev.to_host(), recv_mpi);
  this->expect_same_counters(Exchange::allgather_backward_dkdv);
}

TYPED_TEST(NcclVsMpi, AllreduceSum) {
  using T = TypeParam;
  const MPI_Comm world = MPI_COMM_WORLD;
  const int rank = rank_in(world);
  const std::size_t n = 4099;
  std::vector<T> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(rank + static_cast<int>(i % 100));
  std::vector<T> host = values;
  this->mpi->allreduce_sum(View1<T>(host.data(), n), world, Exchange::gradients_replicated);
  const DeviceBuffer<T> dev(values);
  this->nccl->allreduce_sum(View1<T>(dev.data(), n), world, Exchange::gradients_replicated);
  EXPECT_EQ(dev.to_host(), host);
  this->expect_same_counters(Exchange::gradients_replicated);
}

// Groups other than the world, including groups of one rank (even and odd
// ranks of 2): each gets its own NCCL communicator.
TYPED_TEST(NcclVsMpi, SubGroups) {
  using T = TypeParam;
  const int world_rank = rank_in(MPI_COMM_WORLD);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  {
    const int rank = rank_in(half), size = size_of(half);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const std::size_t n = 64;
    std::vector<T> send(n * static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>(100 * world_rank + static_cast<int>(i));

    std::vector<T> shifted_mpi(n), a2a_mpi(send.size());
    PendingExchange mpi_pending;
    this->mpi->post_shift(send.data(), shifted_mpi.data(), n, next, prev, half, Exchange::rsa_forward_k, mpi_pending);
    this->mpi->wait(mpi_pending);
    this->mpi->alltoall(send.data(), a2a_mpi.data(), n, half, Exchange::ulysses_forward_out);
    std::vector<T> sum_mpi = send;
    this->mpi->allreduce_sum(View1<T>(sum_mpi.data(), sum_mpi.size()), half, Exchange::gradients_tensor_parallel);

    const DeviceBuffer<T> send_dev(send), shifted{std::vector<T>(n)}, a2a{std::vector<T>(send.size())}, sum(send);
    this->nccl->attach(half);
    PendingExchange pending;
    this->nccl->post_shift(send_dev.data(), shifted.data(), n, next, prev, half, Exchange::rsa_forward_k, pending);
    this->nccl->wait(pending);
    this->nccl->alltoall(send_dev.data(), a2a.data(), n, half, Exchange::ulysses_forward_out);
    this->nccl->allreduce_sum(View1<T>(sum.data(), send.size()), half, Exchange::gradients_tensor_parallel);

    EXPECT_EQ(shifted.to_host(), shifted_mpi);
    EXPECT_EQ(a2a.to_host(), a2a_mpi);
    EXPECT_EQ(sum.to_host(), sum_mpi);
    for (const Exchange label : {Exchange::rsa_forward_k, Exchange::ulysses_forward_out, Exchange::gradients_tensor_parallel}) this->expect_same_counters(label);
  }
  // The NCCL communicator of `half` is cached by handle: retire the backend
  // before MPI may reuse the handle for another group.
  this->nccl.reset();
  MPI_Comm_free(&half);
}

#else  // no NCCL backend in this build

TEST(NcclVsMpi, Skipped) { GTEST_SKIP() << "built without the NCCL backend (MINIATTN_ENABLE_NCCL=OFF)"; }

#endif

}  // namespace
}  // namespace miniattn
