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
#include <tuple>
#include <utility>
#include <vector>

#include "core/config_json.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/types.hpp"
#include "perfmodel/attention_work.hpp"
#include "perfmodel/kernel_timing.hpp"
#include "perfmodel/predict_mode.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/dense/dense_attention.hpp"
#include "kernels/base/gemm.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/layers/elementwise.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/head_layout.hpp"
#include "kernels/layers/layer_norm.hpp"
#include "perf/flop_count.hpp"
#include "perf/gemm_rate.hpp"
#include "perf/memory_plan.hpp"
#include "perfmodel/performance_model.hpp"
#include "io/text_file.hpp"
#include "core/phase_timer.hpp"

namespace miniattn {

namespace {

// The median of `repeats` values of `sample` after one warm-up call.
double median_after_warmup(int repeats, const std::function<double()>& sample) {
  std::vector<double> values;
  for (int r = 0; r <= repeats; ++r) {
    const double value = sample();
    if (r > 0) values.push_back(value);
  }
  return median(values);
}

// Median seconds of `repeats` calls after one warm-up call; all ranks start together.
double time_median(MPI_Comm world, int repeats, const std::function<void()>& work) {
  MPI_Barrier(world);
  return median(fenced_timings(1, repeats, work));
}

// The median over ranks of one value per rank (every rank measured at once).
double median_over_ranks(double value, MPI_Comm world) {
  int size = 1;
  MPI_Comm_size(world, &size);
  std::vector<double> all(static_cast<std::size_t>(size));
  MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, world);
  return median(all);
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
    View2<T> dx("calibrate.dx", rows, s.in);
    View2<Param<T>> dw("calibrate.dw", s.out, s.in);  // as the model's weight gradients (fp32 under bf16)
    fill_view(x, 1.0);
    fill_view(w, 0.1);
    fill_view(y, 1.0);
    const View2<const T> xc = x, wc = w, yc = y;
    const double t = time_median(world, 3, [&] {
      kernels::gemm<T>('N', 'T', Acc<T>(1), xc, wc, Acc<T>(0), y);
      kernels::gemm<T>('N', 'N', Acc<T>(1), yc, wc, Acc<T>(0), dx);
      kernels::gemm<T, Param<T>>('T', 'N', Acc<T>(1), yc, xc, Acc<T>(1), dw);
    });
    flops += s.count * 3 * 2.0 * double(rows) * double(s.in) * double(s.out);
    seconds += s.count * t;
  }
  return flops / seconds;
}

// The rates of the deck's attention kernel (kernels.*) on one n x n block of
// the deck's heads and head width, FLOPs counted as the model counts the
// tiles computed (block_tile_share). The host kernels: on a full block (no
// tile on a mask's edge), and on the edge tiles of a causal block whose window
// is one key tile, every tile of which is on an edge: edge tiles ran at half
// the rate, and a causal block's one rate predicted windows 5-24% fast
// (docs/results/2026-11-29-cpu-xeon.md). cuDNN's tiles are not ours to
// count: one rate of a block under the deck's causal mask.
template <class T>
void measure_attention(const Config& c, index_t n, MPI_Comm world, RankRates& rates) {
  AttentionOperands<T> a(c.model.heads, n, c.model.head_dim());
  kernels::AttentionBlocking blocking = kernels::choose_attention_tiles<T>(c.kernels, a.dh).blocking;
  blocking.deterministic = c.kernels.deterministic;
  const kernels::AttentionWorkspace<T> workspace(a.shape(), blocking);
  const index_t qb = blocking.query_tile(), kb = blocking.key_tile(sizeof(T) < sizeof(Acc<T>));
  const double block_flops = 4.0 * a.pairs() * double(a.dh);
  const auto rates_under = [&](const kernels::AttentionMask& mask, const TileShare& share) {
    const double tf = time_median(world, 3, [&] { attention_forward_pass(a, mask, blocking, workspace); });
    const double tb = time_median(world, 3, [&] { attention_backward_pass(a, mask, blocking, workspace); });
    return std::pair{share.computed() * block_flops / tf, 2.5 * share.computed() * block_flops / tb};
  };
  if (blocking.kernel == AttentionKernel::cudnn) {
    const bool causal = c.model.causal;
    std::tie(rates.attention_flops_forward, rates.attention_flops_backward) =
        rates_under(causal, block_tile_share(n, qb, kb, causal, 0));
    return;
  }
  std::tie(rates.attention_flops_forward, rates.attention_flops_backward) = rates_under(false, {1.0, 0.0});
  const kernels::AttentionMask edge_mask(true, kb);
  std::tie(rates.attention_edge_flops_forward, rates.attention_edge_flops_backward) =
      rates_under(edge_mask, block_tile_share(n, qb, kb, true, kb));
}

// RSA's dense kernels: score + softmax + apply (forward), dense block backward.
template <class T>
void measure_rsa(const Config& c, index_t n, MPI_Comm world, RankRates& rates) {
  AttentionOperands<T> a(c.model.heads, n, c.model.head_dim());
  kernels::View5<T> blocks("calibrate.p", 1, 1, a.heads, n, n);  // one block of the score row
  const View4<T> probabilities = Kokkos::subview(blocks, 0, Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL(), Kokkos::ALL());
  fill_view(a.delta, 0.1);
  const View4<Acc<T>> out("calibrate.out", 1, a.heads, n, a.dh), dq("calibrate.dq", 1, a.heads, n, a.dh);
  const double tf = time_median(world, 2, [&] {
    kernels::score_block<T>(a.q, a.k, a.positions, a.positions, false, probabilities);
    kernels::softmax_over_blocks<T>(blocks, a.lse);
    Kokkos::deep_copy(out, Acc<T>(0));
    kernels::apply_probabilities<T>(probabilities, a.v, out);
  });
  fill_view(probabilities, 0.001);  // no zero probabilities: every pair is worked on
  const View4<T> score_grads("calibrate.score_grads", 1, a.heads, kernels::dense_backward_rows(n), n);
  const double tb = time_median(world, 2, [&] {
    kernels::dense_block_backward<T>(probabilities, a.q, a.k, a.v, a.dout, a.delta, score_grads, dq, a.dk, a.dv);
  });
  rates.rsa_flops_forward = a.pairs() * 4.0 * double(a.dh) / tf;
  rates.rsa_flops_backward = a.pairs() * 10.0 * double(a.dh) / tb;
}

// The elementwise kernels of one transformer block, forward and backward, on
// [rows, D] and [rows, F] arrays, counted as the performance model counts them
// (perfmodel/performance_model.hpp, elementwise_scalars); the block's other element-wise
// work (bias rows and bias gradients) is assumed to run at the same rate.
template <class T>
double measure_elementwise_bandwidth(const ModelConfig& m, index_t rows, MPI_Comm world) {
  const index_t D = m.d_model, F = m.ffn_width(), H = m.heads, Dh = m.head_dim();
  View2<T> x("calibrate.x", rows, D), y("calibrate.y", rows, D), z("calibrate.z", rows, D), dy("calibrate.dy", rows, D),
      dx("calibrate.dx", rows, D);
  View2<T> qkv("calibrate.qkv", rows, 3 * D), h("calibrate.h", rows, F), g("calibrate.g", rows, F);
  View4<T> q("calibrate.q", 1, H, rows, Dh), k("calibrate.k", 1, H, rows, Dh), v("calibrate.v", 1, H, rows, Dh);
  View1<T> gamma("calibrate.gamma", D), beta("calibrate.beta", D);
  View1<Param<T>> dgamma("calibrate.dgamma", D), dbeta("calibrate.dbeta", D);
  View1<Acc<T>> mean("calibrate.mean", rows), rstd("calibrate.rstd", rows);
  View2<Acc<T>> partials("calibrate.partials", kernels::column_sum_chunks(rows), D);
  for (const auto& view : {x, dy, qkv, h}) fill_view(view, 1.0);
  Kokkos::deep_copy(gamma, T(1));
  const double t = time_median(world, 5, [&] {
    kernels::layer_norm_forward<T>(x, gamma, beta, y, mean, rstd);
    kernels::split_qkv_heads<T>(qkv, q, k, v);
    kernels::merge_heads<T>(q, z);
    kernels::add<T>(dx, x, z);
    kernels::layer_norm_forward<T>(dx, gamma, beta, y, mean, rstd);
    kernels::gelu_forward<T>(h, g);
    kernels::add<T>(z, dx, y);
    kernels::gelu_backward<T>(h, g, g);
    kernels::layer_norm_backward<T>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials);
    kernels::split_heads<T>(dx, q);
    kernels::merge_qkv_heads<T>(q, k, v, qkv);
    kernels::layer_norm_backward<T>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials);
  });
  namespace e = elementwise_scalars;
  const double bytes = e::calibrated_block_d * double(rows) * double(D) + e::calibrated_block_f * double(rows) * double(F);
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

// Between world ranks `rank` and `other`, one of them 0, both calling.
LinkFigures measure_link_between(int rank, int other, MPI_Comm world) {
  const int big = 16 << 20;
  std::vector<char> send(big, 1), recv(big, 0);
  const auto pingpong = [&](int bytes) {
    const double t0 = wall_seconds();
    if (rank == 0) MPI_Send(send.data(), bytes, MPI_BYTE, other, 1, world);
    MPI_Recv(recv.data(), bytes, MPI_BYTE, other, 1, world, MPI_STATUS_IGNORE);
    if (rank != 0) MPI_Send(send.data(), bytes, MPI_BYTE, other, 1, world);
    return (wall_seconds() - t0) / 2;
  };
  // Seconds of `work` started together with the partner, during a big
  // exchange both ways (posted before, waited for after) when `exchanging`.
  const auto timed = [&](bool exchanging, const std::function<void()>& work) {
    MPI_Sendrecv(nullptr, 0, MPI_BYTE, other, 3, nullptr, 0, MPI_BYTE, other, 3, world, MPI_STATUS_IGNORE);
    const double t0 = wall_seconds();
    MPI_Request requests[2];
    if (exchanging) MPI_Irecv(recv.data(), big, MPI_BYTE, other, 2, world, &requests[0]);
    if (exchanging) MPI_Isend(send.data(), big, MPI_BYTE, other, 2, world, &requests[1]);
    work();
    if (exchanging) MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    return wall_seconds() - t0;
  };
  LinkFigures f;
  f.measured = true;
  for (int warm = 0; warm < 100; ++warm) median_after_warmup(1, [&] { return pingpong(8); });
  f.latency = median_after_warmup(2000, [&] { return pingpong(8); });
  f.pingpong_bandwidth = big / median_after_warmup(10, [&] { return pingpong(big); });
  const double t_exchange = median_after_warmup(10, [&] { return timed(true, [] {}); });
  f.exchange_bandwidth = big / t_exchange;

  // Overlap: post the exchange, compute about twice its time, then wait, as
  // the ring does; hidden = exchange + compute - both.
  const index_t n = 256;
  View2<float> a("calibrate.a", n, n), b("calibrate.b", n, n), c("calibrate.c", n, n);
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(b, 0.5f);
  int calls = 1;
  const auto compute = [&] {
    for (int i = 0; i < calls; ++i) kernels::gemm<float>('N', 'N', 1.0f, a, b, 0.0f, c);
    compat::fence("miniattn::calibrate");
  };
  compute();
  calls = 4;
  const double t_one = timed(false, compute) / 4;
  calls = static_cast<int>(std::ceil(2 * t_exchange / std::max(t_one, 1e-7)));
  int agreed = calls;  // both partners must do the same work
  MPI_Sendrecv(&calls, 1, MPI_INT, other, 4, &agreed, 1, MPI_INT, other, 4, world, MPI_STATUS_IGNORE);
  calls = std::max(calls, agreed);
  std::vector<double> t_compute, t_both;
  for (int i = 0; i <= 5; ++i) {
    const double alone = timed(false, compute), both = timed(true, compute);
    if (i == 0) continue;
    t_compute.push_back(alone);
    t_both.push_back(both);
  }
  const double hidden = t_exchange + median(t_compute) - median(t_both);
  f.overlap = std::min(1.0, std::max(0.0, hidden / t_exchange));
  return f;
}

// Between world ranks 0 and `partner`: rank 0's figures, on every rank (every rank calls it).
LinkFigures measure_link(int partner, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  LinkFigures f;
  MPI_Barrier(world);
  if (rank == 0 || rank == partner) f = measure_link_between(rank, rank == 0 ? partner : 0, world);
  double values[] = {f.measured ? 1.0 : 0.0, f.latency, f.pingpong_bandwidth, f.exchange_bandwidth, f.overlap};
  MPI_Bcast(values, 5, MPI_DOUBLE, 0, world);
  return {values[0] > 0, values[1], values[2], values[3], values[4]};
}

std::string format_value(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

// What calibrate measures, at which sizes, and what it found.
struct Calibration {
  int ranks = 1;
  int off_node = 0;  // the first world rank on another node than rank 0's (ranks: none)
  index_t rows = 0, attention_n = 0, rsa_n = 0;  // GEMM rows; attention and RSA block rows
  MachineDescription machine;                    // ranks_per_node: the size of rank 0's node
  double square_gemm = 0, copy_bandwidth = 0;
  LinkFigures intra, inter;
};

// The ranks and nodes (ranks sharing memory) of this run, and the sizes to
// measure at: GEMMs at its local rows, kernels at its sequence length, within
// bounds that keep calibration short.
Calibration plan_calibration(const Config& c, MPI_Comm world) {
  Calibration k;
  int rank = 0, ranks_per_node = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &k.ranks);
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_first = rank;
  MPI_Comm_size(node, &ranks_per_node);
  MPI_Allreduce(&rank, &node_first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  MPI_Bcast(&ranks_per_node, 1, MPI_INT, 0, world);
  k.machine.ranks_per_node = ranks_per_node;
  const int candidate = node_first == 0 ? k.ranks : rank;
  MPI_Allreduce(&candidate, &k.off_node, 1, MPI_INT, MPI_MIN, world);

  const ModelConfig& m = c.model;
  const index_t local_rows = std::max<index_t>(1, m.batch / c.parallel.dp) *
                             std::max<index_t>(1, m.seq_len / (k.ranks / c.parallel.dp));
  k.rows = std::min<index_t>(std::max<index_t>(local_rows, 256), 8192);
  // cuDNN's kernels take milliseconds where the others take seconds, and
  // blocks of 2048 rows leave them far from their rate on long sequences.
  // The host kernels at the blocks of the check's 2-rank runs (N = 8192).
  const index_t attention_cap = c.kernels.attention == AttentionKernel::cudnn ? 32768 : 4096;
  k.attention_n = std::min<index_t>(std::max<index_t>(m.seq_len, 256), attention_cap);
  // RSA's dense blocks are a rank's rows against a source's, n x n a head:
  // timed at that n (to 4096), where its score rows leave the caches as the
  // run's do (at 1024 rows they did not, and RSA was predicted 25% fast).
  const index_t sp_rows = m.seq_len / std::max<index_t>(1, k.ranks / c.parallel.dp);
  k.rsa_n = std::min<index_t>(std::max<index_t>(sp_rows, 256), 4096);
  return k;
}

// Every compute rate, timed with the ranks of `comm` working at once.
template <class T>
RankRates measure_rates(const Config& c, const Calibration& k, MPI_Comm comm) {
  RankRates r;
  r.gemm_flops = measure_model_gemm_flops<T>(c.model, k.rows, comm);
  measure_attention<T>(c, k.attention_n, comm, r);
  measure_rsa<T>(c, k.rsa_n, comm, r);
  r.elementwise_bandwidth = measure_elementwise_bandwidth<T>(c.model, k.rows, comm);
  return r;
}

// Rank 0 measures alone while the other ranks sleep (a polled non-blocking
// barrier, so that no rank spins on a core the measurement may share).
template <class T>
RankRates measure_rates_alone(const Config& c, const Calibration& k, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  RankRates rates;
  if (rank == 0) rates = measure_rates<T>(c, k, MPI_COMM_SELF);
  MPI_Request request;
  MPI_Ibarrier(world, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(2000);
  }
  for (const RateField& f : kRateFields) MPI_Bcast(&(rates.*f.member), 1, MPI_DOUBLE, 0, world);
  return rates;
}

// The links: rank 1 shares rank 0's node unless the second node starts at
// rank 1; without a partner, nominal defaults (intra) or the intra figures (inter).
void measure_links(Calibration& k, MPI_Comm world) {
  if (k.ranks >= 2 && k.off_node > 1) k.intra = measure_link(1, world);
  if (k.off_node < k.ranks) k.inter = measure_link(k.off_node, world);
  const LinkFigures& any = k.intra.measured ? k.intra : k.inter;
  MachineDescription& m = k.machine;
  m.latency_intra = any.measured ? any.latency : 1e-6;
  m.bandwidth_intra = any.measured ? any.exchange_bandwidth : k.copy_bandwidth / 2;
  m.latency_inter = k.inter.measured ? k.inter.latency : m.latency_intra;
  m.bandwidth_inter = k.inter.measured ? k.inter.exchange_bandwidth : m.bandwidth_intra;
  m.overlap_efficiency = any.measured ? any.overlap : 0.0;
}

template <class T>
void measure(const Config& c, Calibration& k, MPI_Comm world) {
  MachineDescription& m = k.machine;
  m.attention_kernel = to_string(kernels::choose_attention_tiles<T>(c.kernels, c.model.head_dim()).blocking.kernel);
  static_cast<RankRates&>(m) = measure_rates<T>(c, k, world);  // every rank at once; the median over ranks
  for (const RateField& f : kRateFields) m.*f.member = median_over_ranks(m.*f.member, world);
  if (k.ranks > 1 && m.ranks_per_node > 1) m.alone = measure_rates_alone<T>(c, k, world);
  k.square_gemm = median_over_ranks(measure_gemm_flops<T>(), world);
  k.copy_bandwidth = median_over_ranks(measure_copy_bandwidth<T>(std::size_t{1} << 23, world), world);
  const int ranks_per_node = static_cast<int>(m.ranks_per_node);
  double memory = static_cast<double>(memory_available_per_rank(c.run.memory_per_rank_gib, ranks_per_node));
  MPI_Bcast(&memory, 1, MPI_DOUBLE, 0, world);
  m.memory_bytes_per_rank = memory > 0 ? memory : 1.0;
  measure_links(k, world);
}

// What measure_attention timed, for the machine file's description.
std::string attention_blocks_timed(const Config& c, const std::string& kernel) {
  if (kernel == to_string(AttentionKernel::cudnn))
    return std::string("attention rates on a ") + (c.model.causal ? "causal" : "full") + " block";
  return "attention rates on a full block and, for tiles on a mask's edge, a causal block of a one-tile window";
}

void describe(const Config& c, Calibration& k) {
  MachineDescription& m = k.machine;
  char host[256] = "this machine";
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  m.name = std::string("calibrated on ") + host;
  m.precision = to_string(c.model.precision);
  std::ostringstream text;
  text << "Measured by miniattn run.mode calibrate on " << k.ranks << " ranks (" << m.ranks_per_node << " per node), "
       << m.precision << ", " << m.attention_kernel << " attention, model D=" << c.model.d_model << " H=" << c.model.heads << " F=" << c.model.ffn_width()
       << " V=" << c.model.vocab << ", " << attention_blocks_timed(c, m.attention_kernel) << ". ";
  if (!k.intra.measured) text << "Intra-node link not measured (one rank per node or one rank): defaults. ";
  if (!k.inter.measured) text << "Inter-node link not measured (one node): set to the intra-node figures.";
  m.description = text.str();
}

// The "calibration:" mapping of the machine file.
std::string calibration_notes(const Calibration& k) {
  std::ostringstream notes;
  const auto note = [&](const std::string& key, double value) { notes << "  " << key << ": " << format_value(value) << "\n"; };
  notes << "# How the figures were measured (informational; predict ignores this mapping).\ncalibration:\n";
  note("ranks", k.ranks);
  note("gemm_rows", static_cast<double>(k.rows));
  note("gemm_square_1024_flops", k.square_gemm);
  note("attention_block_rows", static_cast<double>(k.attention_n));
  note("rsa_block_rows", static_cast<double>(k.rsa_n));
  note("copy_bandwidth", k.copy_bandwidth);
  for (const auto& [where, link] : {std::make_pair("intra_", &k.intra), std::make_pair("inter_", &k.inter)}) {
    if (!link->measured) continue;
    note(where + std::string("pingpong_latency"), link->latency);
    note(where + std::string("pingpong_bandwidth"), link->pingpong_bandwidth);
    note(where + std::string("exchange_bandwidth"), link->exchange_bandwidth);
    note(where + std::string("overlap"), link->overlap);
  }
  return notes.str();
}

nlohmann::json calibration_json(const Config& c, const Calibration& k) {
  nlohmann::json machine = machine_to_json(k.machine);
  for (const char* key : {"name", "description", "precision", "attention_kernel"}) machine.erase(key);
  machine.update({{"gemm_square_1024_flops", k.square_gemm},
                  {"copy_bandwidth", k.copy_bandwidth},
                  {"intra_measured", k.intra.measured},
                  {"inter_measured", k.inter.measured}});
  return {{"program", "miniattn"},         {"mode", "calibrate"},
          {"config", config_to_json(c)},   {"ranks", k.ranks},
          {"precision", k.machine.precision}, {"attention_kernel", k.machine.attention_kernel},
          {"machine_file", c.run.machine},
          {"machine", machine}};
}

}  // namespace

template <class T>
nlohmann::json run_calibrate(const Config& c, MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  Calibration k = plan_calibration(c, world);
  const ModelConfig& m = c.model;
  if (rank == 0) {
    std::printf("miniattn: calibrate, %s, %d ranks (%d per node), model D=%lld H=%lld F=%lld V=%lld L=%lld; "
                "GEMMs at %lld rows, attention at n=%lld, RSA at n=%lld; rates with every rank busy%s\n",
                to_string(m.precision), k.ranks, static_cast<int>(k.machine.ranks_per_node),
                static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
                static_cast<long long>(m.ffn_width()), static_cast<long long>(m.vocab), static_cast<long long>(m.layers),
                static_cast<long long>(k.rows), static_cast<long long>(k.attention_n),
                static_cast<long long>(k.rsa_n), k.ranks > 1 ? ", then rank 0 alone" : "");
    std::fflush(stdout);
  }
  measure<T>(c, k, world);
  describe(c, k);
  validate_machine(k.machine, "calibrate");
  const std::string yaml = machine_to_yaml(
      k.machine,
      "miniattn machine description, written by run.mode calibrate (measured, not nominal).\n"
      "Per rank; rates for the precision below. Read by run.mode predict (run.machine).",
      calibration_notes(k));
  if (rank == 0) {
    write_file_atomically(c.run.machine, yaml, "run.machine");
    std::printf("%sminiattn: machine description written to %s\n", yaml.c_str(), c.run.machine.c_str());
    std::fflush(stdout);
  }
  return calibration_json(c, k);
}

template nlohmann::json run_calibrate<float>(const Config&, MPI_Comm);
template nlohmann::json run_calibrate<double>(const Config&, MPI_Comm);
template nlohmann::json run_calibrate<bf16>(const Config&, MPI_Comm);

}  // namespace miniattn
