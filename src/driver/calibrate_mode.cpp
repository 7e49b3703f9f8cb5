// run.mode calibrate: measures this machine for the performance model and
// writes the machine description (see predict_mode.hpp).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/config_json.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/types.hpp"
#include "driver/predict_mode.hpp"
#include "kernels/attention.hpp"
#include "kernels/dense_attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/head_layout.hpp"
#include "kernels/layer_norm.hpp"
#include "kernels/reduction.hpp"
#include "perf/gemm_rate.hpp"
#include "perf/memory_plan.hpp"
#include "perf/performance_model.hpp"
#include "perf/phase_timer.hpp"

namespace miniattn {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Median seconds of `repeats` calls after one warm-up call; all ranks start together.
double time_median(MPI_Comm world, int repeats, const std::function<void()>& work) {
  std::vector<double> seconds;
  MPI_Barrier(world);
  for (int r = 0; r <= repeats; ++r) {
    compat::fence("miniattn::calibrate");
    const double t0 = wall_seconds();
    work();
    compat::fence("miniattn::calibrate");
    if (r > 0) seconds.push_back(wall_seconds() - t0);
  }
  return median_of(seconds);
}

// The median over ranks of one value per rank (every rank measured at once).
double median_over_ranks(double value, MPI_Comm world) {
  int size = 1;
  MPI_Comm_size(world, &size);
  std::vector<double> all(static_cast<std::size_t>(size));
  MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, world);
  return median_of(all);
}

template <class T>
void fill(const Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>& flat, double scale) {
  Kokkos::parallel_for(
      "miniattn::calibrate_fill", Kokkos::RangePolicy<ExecSpace>(0, flat.extent(0)), KOKKOS_LAMBDA(const std::size_t i) {
        flat(i) = static_cast<T>(scale * (static_cast<double>((i * 7919) % 1000) / 1000.0 - 0.5));
      });
}

template <class V>
void fill_view(const V& view, double scale) {
  using T = typename V::non_const_value_type;
  fill<T>(Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>(view.data(), view.span()), scale);
}

// Dense-layer GEMMs of the model at `rows` rows: for every linear layer the
// forward y = x W^T, and the backward dx = dy W and dW += dy^T x, weighted by
// how often each shape occurs (L blocks of qkv, proj, fc1, fc2, one head).
template <class T>
double measure_model_gemm_flops(const ModelConfig& m, index_t rows, MPI_Comm world) {
  const index_t D = m.d_model, F = m.ffn_width(), V = m.vocab;
  struct Shape {
    index_t in, out;
    double count;
  };
  const std::vector<Shape> shapes = {{D, 3 * D, double(m.layers)}, {D, D, double(m.layers)}, {D, F, double(m.layers)},
                                     {F, D, double(m.layers)}, {D, V, 1.0}};
  double flops = 0, seconds = 0;
  for (const Shape& s : shapes) {
    View2<T> x("calibrate.x", rows, s.in), w("calibrate.w", s.out, s.in), y("calibrate.y", rows, s.out);
    View2<T> dx("calibrate.dx", rows, s.in), dw("calibrate.dw", s.out, s.in);
    fill_view(x, 1.0);
    fill_view(w, 0.1);
    fill_view(y, 1.0);
    const double t = time_median(world, 3, [&] {
      kernels::gemm<T>('N', 'T', T(1), x, w, T(0), y);
      kernels::gemm<T>('N', 'N', T(1), y, w, T(0), dx);
      kernels::gemm<T>('T', 'N', T(1), y, x, T(1), dw);
    });
    flops += s.count * 3 * 2.0 * double(rows) * double(s.in) * double(s.out);
    seconds += s.count * t;
  }
  return flops / seconds;
}

struct AttentionRates {
  double forward = 0, backward = 0;
};

// The blockwise kernel on one non-causal block (all tiles full): B = 1, the
// deck's heads and head width, n query and key rows.
template <class T>
AttentionRates measure_attention(const Config& c, index_t n, MPI_Comm world) {
  const index_t B = 1, H = c.model.heads, Dh = c.model.head_dim();
  View4<T> q("calibrate.q", B, H, n, Dh), k("calibrate.k", B, H, n, Dh), v("calibrate.v", B, H, n, Dh);
  View4<T> out("calibrate.out", B, H, n, Dh), dout("calibrate.dout", B, H, n, Dh);
  View4<T> dq("calibrate.dq", B, H, n, Dh), dk("calibrate.dk", B, H, n, Dh), dv("calibrate.dv", B, H, n, Dh);
  View3<T> lse("calibrate.lse", B, H, n), row_sum("calibrate.row_sum", B, H, n), delta("calibrate.delta", B, H, n);
  View1<index_t> pos("calibrate.positions", n);
  Kokkos::parallel_for(
      "miniattn::calibrate_positions", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const index_t i) { pos(i) = i; });
  for (const auto& view : {q, k, v, dout}) fill_view(view, 1.0);
  kernels::AttentionBlocking blocking;
  blocking.query_block = c.kernels.query_block;
  blocking.key_block = c.kernels.key_block;
  const double flops = 4.0 * double(B * H) * double(n) * double(n) * double(Dh);
  AttentionRates r;
  const double tf = time_median(world, 3, [&] {
    kernels::attention_forward<T>(q, k, v, pos, pos, false, blocking, out, lse, row_sum);
  });
  const kernels::TransposedKeys<T> transposed(B, H, Dh, n);
  const double tb = time_median(world, 3, [&] {
    kernels::attention_backward_delta<T>(out, dout, delta);
    Kokkos::deep_copy(dq, T(0));
    Kokkos::deep_copy(dk, T(0));
    Kokkos::deep_copy(dv, T(0));
    kernels::attention_backward_accumulate<T>(q, k, v, dout, lse, delta, pos, pos, false, blocking, dq, dk, dv,
                                              transposed);
  });
  r.forward = flops / tf;
  r.backward = 2.5 * flops / tb;
  return r;
}

// RSA's dense kernels on one non-causal n x n block: score + softmax + apply
// (forward), dense block backward.
template <class T>
AttentionRates measure_rsa(const Config& c, index_t n, MPI_Comm world) {
  const index_t B = 1, H = c.model.heads, Dh = c.model.head_dim();
  View4<T> q("calibrate.q", B, H, n, Dh), k("calibrate.k", B, H, n, Dh), v("calibrate.v", B, H, n, Dh);
  View4<T> out("calibrate.out", B, H, n, Dh), dout("calibrate.dout", B, H, n, Dh);
  View4<T> dq("calibrate.dq", B, H, n, Dh), dk("calibrate.dk", B, H, n, Dh), dv("calibrate.dv", B, H, n, Dh);
  kernels::View5<T> blocks("calibrate.p", 1, B, H, n, n);  // one block of the score row
  const View4<T> probabilities = Kokkos::subview(blocks, 0, Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL());
  View3<T> lse("calibrate.lse", B, H, n);
  View3<T> delta("calibrate.delta", B, H, n);
  View1<index_t> pos("calibrate.positions", n);
  Kokkos::parallel_for(
      "miniattn::calibrate_positions", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const index_t i) { pos(i) = i; });
  for (const auto& view : {q, k, v, dout}) fill_view(view, 1.0);
  fill_view(delta, 0.1);
  const double pairs = double(B * H) * double(n) * double(n);
  AttentionRates r;
  const double tf = time_median(world, 2, [&] {
    kernels::score_block<T>(q, k, pos, pos, false, probabilities);
    kernels::softmax_over_blocks<T>(blocks, lse);
    Kokkos::deep_copy(out, T(0));
    kernels::apply_probabilities<T>(probabilities, v, out);
  });
  fill_view(probabilities, 0.001);  // no zero probabilities: every pair is worked on
  const double tb = time_median(world, 2, [&] {
    kernels::dense_block_backward<T>(probabilities, q, k, v, dout, delta, dq, dk, dv);
  });
  r.forward = pairs * 4.0 * double(Dh) / tf;
  r.backward = pairs * 10.0 * double(Dh) / tb;
  return r;
}

// The elementwise kernels of one transformer block, forward and backward, on
// [rows, D] and [rows, F] arrays, in the byte convention of the performance
// model: forward LayerNorm 2 x 3 RD, q/k/v split 6 RD, head merge 2 RD,
// residual copies 2 x 2 RD and adds 2 x 3 RD, GELU 2 RF; backward GELU 3 RF,
// LayerNorm 2 x 5 RD, head split 2 RD, q/k/v merge 6 RD. That is 42 RD + 5 RF
// of the block's 55 RD + 7 RF (the rest, bias rows and bias gradients, is
// assumed to run at the same rate).
template <class T>
double measure_elementwise_bandwidth(const ModelConfig& m, index_t rows, MPI_Comm world) {
  const index_t D = m.d_model, F = m.ffn_width(), H = m.heads, Dh = m.head_dim();
  View2<T> x("calibrate.x", rows, D), y("calibrate.y", rows, D), z("calibrate.z", rows, D), dy("calibrate.dy", rows, D),
      dx("calibrate.dx", rows, D);
  View2<T> qkv("calibrate.qkv", rows, 3 * D), h("calibrate.h", rows, F), g("calibrate.g", rows, F);
  View4<T> q("calibrate.q", 1, H, rows, Dh), k("calibrate.k", 1, H, rows, Dh), v("calibrate.v", 1, H, rows, Dh);
  View1<T> gamma("calibrate.gamma", D), beta("calibrate.beta", D), dgamma("calibrate.dgamma", D),
      dbeta("calibrate.dbeta", D), mean("calibrate.mean", rows), rstd("calibrate.rstd", rows);
  View2<T> partials("calibrate.partials", kernels::column_sum_chunks(rows), D);
  for (const auto& view : {x, dy, qkv, h}) fill_view(view, 1.0);
  Kokkos::deep_copy(gamma, T(1));
  const double t = time_median(world, 5, [&] {
    kernels::layer_norm_forward<T>(x, gamma, beta, y, mean, rstd);
    kernels::split_qkv_heads<T>(qkv, q, k, v);
    kernels::merge_heads<T>(q, z);
    Kokkos::deep_copy(dx, x);
    kernels::add_inplace<T>(dx, z);
    kernels::layer_norm_forward<T>(dx, gamma, beta, y, mean, rstd);
    kernels::gelu_forward<T>(h, g);
    Kokkos::deep_copy(z, dx);
    kernels::add_inplace<T>(z, y);
    kernels::gelu_backward<T>(h, g, g);
    kernels::layer_norm_backward<T>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials);
    kernels::split_heads<T>(dx, q);
    kernels::merge_qkv_heads<T>(q, k, v, qkv);
    kernels::layer_norm_backward<T>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials);
  });
  const double bytes = 42.0 * double(rows) * double(D) + 5.0 * double(rows) * double(F);
  return bytes * sizeof(T) / t;
}

// Plain copy bandwidth of a large array (for the notes: what STREAM would say).
template <class T>
double measure_copy_bandwidth(std::size_t elements, MPI_Comm world) {
  Kokkos::View<T*, Kokkos::LayoutRight, MemSpace> a("calibrate.a", elements), b("calibrate.b", elements);
  fill<T>(a, 1.0);
  const double t = time_median(world, 5, [&] { Kokkos::deep_copy(b, a); });
  return 2.0 * double(elements) * sizeof(T) / t;
}

struct LinkFigures {
  bool measured = false;
  double latency = 0;             // half a small-message round trip
  double pingpong_bandwidth = 0;  // one direction, the partner idle
  double exchange_bandwidth = 0;  // both partners send at once (a ring's shift)
  double overlap = 1.0;           // fraction of a posted exchange that progresses during compute
};

// Between world ranks 0 and `partner`; every rank must call it.
LinkFigures measure_link(int partner, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  LinkFigures f;
  const bool active = rank == 0 || rank == partner;
  const int other = rank == 0 ? partner : 0;
  const std::size_t big = std::size_t{16} << 20;  // 16 MiB
  std::vector<char> send(active ? big : 1, 1), recv(active ? big : 1, 0);
  MPI_Barrier(world);
  if (active) {
    auto pingpong = [&](std::size_t bytes, int iterations) {
      std::vector<double> times;
      for (int i = 0; i <= iterations; ++i) {
        const double t0 = wall_seconds();
        if (rank == 0) {
          MPI_Send(send.data(), static_cast<int>(bytes), MPI_BYTE, other, 1, world);
          MPI_Recv(recv.data(), static_cast<int>(bytes), MPI_BYTE, other, 1, world, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(recv.data(), static_cast<int>(bytes), MPI_BYTE, other, 1, world, MPI_STATUS_IGNORE);
          MPI_Send(send.data(), static_cast<int>(bytes), MPI_BYTE, other, 1, world);
        }
        if (i > 0) times.push_back((wall_seconds() - t0) / 2);
      }
      return median_of(times);
    };
    for (int warm = 0; warm < 100; ++warm) pingpong(8, 1);
    f.latency = pingpong(8, 2000);
    f.pingpong_bandwidth = double(big) / pingpong(big, 10);
    auto exchange = [&]() {
      MPI_Request reqs[2];
      MPI_Irecv(recv.data(), static_cast<int>(big), MPI_BYTE, other, 2, world, &reqs[0]);
      MPI_Isend(send.data(), static_cast<int>(big), MPI_BYTE, other, 2, world, &reqs[1]);
      MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    };
    std::vector<double> times;
    for (int i = 0; i <= 10; ++i) {
      MPI_Sendrecv(nullptr, 0, MPI_BYTE, other, 3, nullptr, 0, MPI_BYTE, other, 3, world, MPI_STATUS_IGNORE);
      const double t0 = wall_seconds();
      exchange();
      if (i > 0) times.push_back(wall_seconds() - t0);
    }
    const double t_exchange = median_of(times);
    f.exchange_bandwidth = double(big) / t_exchange;

    // Overlap: post the exchange, compute about twice its time, then wait, as
    // the ring does; hidden = exchange + compute - both.
    const index_t n = 256;
    View2<float> a("calibrate.a", n, n), b("calibrate.b", n, n), c("calibrate.c", n, n);
    Kokkos::deep_copy(a, 1.0f);
    Kokkos::deep_copy(b, 0.5f);
    auto compute = [&](int calls) {
      for (int i = 0; i < calls; ++i) kernels::gemm<float>('N', 'N', 1.0f, a, b, 0.0f, c);
      compat::fence("miniattn::calibrate");
    };
    compute(1);
    double t_one = wall_seconds();
    compute(4);
    t_one = (wall_seconds() - t_one) / 4;
    int calls = static_cast<int>(std::ceil(2 * t_exchange / std::max(t_one, 1e-7)));
    // Both partners must agree on the work.
    int agreed = calls;
    MPI_Sendrecv(&calls, 1, MPI_INT, other, 4, &agreed, 1, MPI_INT, other, 4, world, MPI_STATUS_IGNORE);
    calls = std::max(calls, agreed);
    std::vector<double> t_compute, t_both;
    for (int i = 0; i <= 5; ++i) {
      MPI_Sendrecv(nullptr, 0, MPI_BYTE, other, 3, nullptr, 0, MPI_BYTE, other, 3, world, MPI_STATUS_IGNORE);
      double t0 = wall_seconds();
      compute(calls);
      if (i > 0) t_compute.push_back(wall_seconds() - t0);
      MPI_Sendrecv(nullptr, 0, MPI_BYTE, other, 3, nullptr, 0, MPI_BYTE, other, 3, world, MPI_STATUS_IGNORE);
      t0 = wall_seconds();
      MPI_Request reqs[2];
      MPI_Irecv(recv.data(), static_cast<int>(big), MPI_BYTE, other, 2, world, &reqs[0]);
      MPI_Isend(send.data(), static_cast<int>(big), MPI_BYTE, other, 2, world, &reqs[1]);
      compute(calls);
      MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
      if (i > 0) t_both.push_back(wall_seconds() - t0);
    }
    const double hidden = t_exchange + median_of(t_compute) - median_of(t_both);
    f.overlap = std::min(1.0, std::max(0.0, hidden / t_exchange));
    f.measured = true;
  }
  // Rank 0's figures for everyone.
  double values[5] = {f.latency, f.pingpong_bandwidth, f.exchange_bandwidth, f.overlap, f.measured ? 1.0 : 0.0};
  MPI_Bcast(values, 5, MPI_DOUBLE, 0, world);
  f.latency = values[0];
  f.pingpong_bandwidth = values[1];
  f.exchange_bandwidth = values[2];
  f.overlap = values[3];
  f.measured = values[4] > 0;
  return f;
}

std::string format_value(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw InputError("run.machine: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw InputError("run.machine: cannot rename " + tmp + " to " + path);
}

struct CalibrationSizes {
  index_t rows = 0, attention_n = 0, rsa_n = 0;
};

// Every compute rate, timed with the ranks of `comm` working at once.
template <class T>
RankRates measure_rates(const Config& c, const CalibrationSizes& sizes, MPI_Comm comm) {
  RankRates r;
  r.gemm_flops = measure_model_gemm_flops<T>(c.model, sizes.rows, comm);
  const AttentionRates attention = measure_attention<T>(c, sizes.attention_n, comm);
  r.attention_flops_forward = attention.forward;
  r.attention_flops_backward = attention.backward;
  const AttentionRates rsa = measure_rsa<T>(c, sizes.rsa_n, comm);
  r.rsa_flops_forward = rsa.forward;
  r.rsa_flops_backward = rsa.backward;
  r.elementwise_bandwidth = measure_elementwise_bandwidth<T>(c.model, sizes.rows, comm);
  return r;
}

std::vector<double> as_vector(const RankRates& r) {
  return {r.gemm_flops, r.attention_flops_forward, r.attention_flops_backward, r.rsa_flops_forward,
          r.rsa_flops_backward, r.elementwise_bandwidth};
}

RankRates from_vector(const std::vector<double>& v) {
  RankRates r;
  r.gemm_flops = v[0];
  r.attention_flops_forward = v[1];
  r.attention_flops_backward = v[2];
  r.rsa_flops_forward = v[3];
  r.rsa_flops_backward = v[4];
  r.elementwise_bandwidth = v[5];
  return r;
}

// Rank 0 measures alone while the other ranks sleep (a polled non-blocking
// barrier, so that no rank spins on a core the measurement may share).
template <class T>
RankRates measure_rates_alone(const Config& c, const CalibrationSizes& sizes, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::vector<double> values(6, 0.0);
  if (rank == 0) values = as_vector(measure_rates<T>(c, sizes, MPI_COMM_SELF));
  MPI_Request request;
  MPI_Ibarrier(world, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(2000);
  }
  MPI_Bcast(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, 0, world);
  return from_vector(values);
}

}  // namespace

template <class T>
nlohmann::json run_calibrate(const Config& c, MPI_Comm world) {
  int rank = 0, world_size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &world_size);
  const bool root = rank == 0;
  // Nodes: ranks sharing memory. ranks_per_node is the size of rank 0's node;
  // off_node the first world rank on another node (world_size if none).
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int ranks_per_node = 1, node_first = rank;
  MPI_Comm_size(node, &ranks_per_node);
  MPI_Allreduce(&rank, &node_first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  MPI_Bcast(&ranks_per_node, 1, MPI_INT, 0, world);
  const int candidate = node_first == 0 ? world_size : rank;
  int off_node = world_size;
  MPI_Allreduce(&candidate, &off_node, 1, MPI_INT, MPI_MIN, world);

  const ModelConfig& m = c.model;
  const index_t local_rows = std::max<index_t>(1, m.batch / c.parallel.dp) * std::max<index_t>(1, m.seq_len / (world_size / c.parallel.dp));
  CalibrationSizes sizes;
  sizes.rows = std::min<index_t>(std::max<index_t>(local_rows, 256), 8192);
  sizes.attention_n = std::min<index_t>(std::max<index_t>(m.seq_len, 256), 2048);
  sizes.rsa_n = std::min<index_t>(sizes.attention_n, 1024);
  if (root) {
    std::printf("miniattn: calibrate, %s, %d ranks (%d per node), model D=%lld H=%lld F=%lld V=%lld L=%lld; "
                "GEMMs at %lld rows, attention at n=%lld, RSA at n=%lld; rates with every rank busy%s\n",
                to_string(m.precision), world_size, ranks_per_node, static_cast<long long>(m.d_model),
                static_cast<long long>(m.heads), static_cast<long long>(m.ffn_width()), static_cast<long long>(m.vocab),
                static_cast<long long>(m.layers), static_cast<long long>(sizes.rows),
                static_cast<long long>(sizes.attention_n), static_cast<long long>(sizes.rsa_n),
                world_size > 1 ? ", then rank 0 alone" : "");
    std::fflush(stdout);
  }

  MachineDescription machine;
  machine.precision = to_string(m.precision);
  {
    // Every rank at once; the median over ranks.
    std::vector<double> busy = as_vector(measure_rates<T>(c, sizes, world));
    for (double& value : busy) value = median_over_ranks(value, world);
    const RankRates rates = from_vector(busy);
    machine.gemm_flops = rates.gemm_flops;
    machine.attention_flops_forward = rates.attention_flops_forward;
    machine.attention_flops_backward = rates.attention_flops_backward;
    machine.rsa_flops_forward = rates.rsa_flops_forward;
    machine.rsa_flops_backward = rates.rsa_flops_backward;
    machine.elementwise_bandwidth = rates.elementwise_bandwidth;
  }
  if (world_size > 1 && ranks_per_node > 1) machine.alone = measure_rates_alone<T>(c, sizes, world);
  const double square_gemm = median_over_ranks(measure_gemm_flops<T>(), world);
  const double copy_bandwidth = median_over_ranks(measure_copy_bandwidth<T>(std::size_t{1} << 23, world), world);
  const std::size_t available = memory_available_per_rank(c.run.memory_per_rank_gib, ranks_per_node);
  double memory = static_cast<double>(available);
  MPI_Bcast(&memory, 1, MPI_DOUBLE, 0, world);
  machine.memory_bytes_per_rank = memory > 0 ? memory : 1.0;
  machine.ranks_per_node = ranks_per_node;

  LinkFigures intra, inter;
  if (world_size >= 2 && off_node > 1) intra = measure_link(1, world);  // rank 1 shares rank 0's node
  if (off_node < world_size) inter = measure_link(off_node, world);
  const LinkFigures& any = intra.measured ? intra : inter;
  const double default_latency = 1e-6, default_bandwidth = copy_bandwidth / 2;
  machine.latency_intra = intra.measured ? intra.latency : (any.measured ? any.latency : default_latency);
  machine.bandwidth_intra = intra.measured ? intra.exchange_bandwidth : (any.measured ? any.exchange_bandwidth : default_bandwidth);
  machine.latency_inter = inter.measured ? inter.latency : machine.latency_intra;
  machine.bandwidth_inter = inter.measured ? inter.exchange_bandwidth : machine.bandwidth_intra;
  machine.overlap_efficiency = any.measured ? any.overlap : 0.0;

  char host[256] = "this machine";
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  machine.name = std::string("calibrated on ") + host;
  std::ostringstream description;
  description << "Measured by miniattn run.mode calibrate on " << world_size << " ranks (" << ranks_per_node
              << " per node), " << to_string(m.precision) << ", model D=" << m.d_model << " H=" << m.heads
              << " F=" << m.ffn_width() << " V=" << m.vocab << ". ";
  if (!intra.measured) description << "Intra-node link not measured (one rank per node or one rank): defaults. ";
  if (!inter.measured) description << "Inter-node link not measured (one node): set to the intra-node figures.";
  machine.description = description.str();
  validate_machine(machine, "calibrate");

  std::ostringstream notes;
  notes << "# How the figures were measured (informational; predict ignores this mapping).\n"
        << "calibration:\n"
        << "  ranks: " << world_size << "\n"
        << "  gemm_rows: " << sizes.rows << "\n"
        << "  gemm_square_1024_flops: " << format_value(square_gemm) << "\n"
        << "  attention_block_rows: " << sizes.attention_n << "\n"
        << "  rsa_block_rows: " << sizes.rsa_n << "\n"
        << "  copy_bandwidth: " << format_value(copy_bandwidth) << "\n";
  if (intra.measured)
    notes << "  intra_pingpong_latency: " << format_value(intra.latency) << "\n"
          << "  intra_pingpong_bandwidth: " << format_value(intra.pingpong_bandwidth) << "\n"
          << "  intra_exchange_bandwidth: " << format_value(intra.exchange_bandwidth) << "\n"
          << "  intra_overlap: " << format_value(intra.overlap) << "\n";
  if (inter.measured)
    notes << "  inter_pingpong_latency: " << format_value(inter.latency) << "\n"
          << "  inter_pingpong_bandwidth: " << format_value(inter.pingpong_bandwidth) << "\n"
          << "  inter_exchange_bandwidth: " << format_value(inter.exchange_bandwidth) << "\n"
          << "  inter_overlap: " << format_value(inter.overlap) << "\n";
  const std::string yaml = machine_to_yaml(
      machine,
      "miniattn machine description, written by run.mode calibrate (measured, not nominal).\n"
      "Per rank; rates for the precision below. Read by run.mode predict (run.machine).",
      notes.str());
  if (root) {
    write_file_atomically(c.run.machine, yaml);
    std::printf("%s", yaml.c_str());
    std::printf("miniattn: machine description written to %s\n", c.run.machine.c_str());
    std::fflush(stdout);
  }

  nlohmann::json result;
  result["program"] = "miniattn";
  result["mode"] = "calibrate";
  result["config"] = config_to_json(c);
  result["ranks"] = world_size;
  result["precision"] = to_string(m.precision);
  result["machine_file"] = c.run.machine;
  result["machine"] = {{"gemm_flops", machine.gemm_flops},
                       {"gemm_square_1024_flops", square_gemm},
                       {"attention_flops_forward", machine.attention_flops_forward},
                       {"attention_flops_backward", machine.attention_flops_backward},
                       {"rsa_flops_forward", machine.rsa_flops_forward},
                       {"rsa_flops_backward", machine.rsa_flops_backward},
                       {"elementwise_bandwidth", machine.elementwise_bandwidth},
                       {"copy_bandwidth", copy_bandwidth},
                       {"memory_bytes_per_rank", machine.memory_bytes_per_rank},
                       {"bandwidth_intra", machine.bandwidth_intra},
                       {"bandwidth_inter", machine.bandwidth_inter},
                       {"latency_intra", machine.latency_intra},
                       {"latency_inter", machine.latency_inter},
                       {"ranks_per_node", machine.ranks_per_node},
                       {"overlap_efficiency", machine.overlap_efficiency},
                       {"alone", {{"gemm_flops", machine.alone.gemm_flops},
                                  {"attention_flops_forward", machine.alone.attention_flops_forward},
                                  {"attention_flops_backward", machine.alone.attention_flops_backward},
                                  {"rsa_flops_forward", machine.alone.rsa_flops_forward},
                                  {"rsa_flops_backward", machine.alone.rsa_flops_backward},
                                  {"elementwise_bandwidth", machine.alone.elementwise_bandwidth}}},
                       {"intra_measured", intra.measured},
                       {"inter_measured", inter.measured}};
  return result;
}

template nlohmann::json run_calibrate<float>(const Config&, MPI_Comm);
template nlohmann::json run_calibrate<double>(const Config&, MPI_Comm);

}  // namespace miniattn
