// Throughput of the blockwise attention kernels against the machine's own GEMM
// rate, measured in the same run (prints only; not a test).
//
// Usage: bench_attention [n] [Dh] [heads] [query_block] [key_block] [options]
//   n            sequence length (default 8192); B = 1
//   Dh, heads    head width (64) and heads (4)
//   query_block, key_block   fused tile sizes (default 0: chosen per backend, as miniattn does)
//   --kernel=auto|fused|gemm|cudnn   the attention kernel (kernels.attention;
//                auto: as miniattn picks). cudnn (bf16, CUDA) is first
//                compared with gemm on the same operands; a mismatch exits 1.
//   --cudnn-nondeterministic   with --kernel=cudnn: cuDNN's non-deterministic
//                backward (dQ summed with atomics), to time what the
//                deterministic one that miniattn runs costs
//   --chunk=C    gemm chunk rows (kernels.chunk; default 0: chosen per backend)
//   --precision=fp32|fp64|bf16|both   (both: fp32 and fp64; bf16 against the bf16 GEMM rate)
//   --reps=R     timed repeats per measurement after one warm-up; best of R (2).
//                At n >= 4096 the warm-up is skipped (the first run is timed
//                too): one pass already takes seconds.
//   --gemm=N     size of the reference GEMM, N x N x N (1024)
//   --no-backward   forward only
//   --clock=wall|cpu   time with the wall clock (default) or with the process's
//                CPU time (CLOCK_PROCESS_CPUTIME_ID). On a machine shared with
//                other jobs the CPU time leaves out the time slices other
//                processes took, so rates are much steadier; it counts every
//                thread of the process, so use it only for one-thread runs.
//                With the wall clock the program ends with a note when a timed
//                run took more than 1.15x its CPU time (a shared core).
//
// FLOP counts: forward 4 n^2 Dh H (the two matrix products); causal half of
// that; backward 2.5x forward (five products). "fwd+bwd" is 3.5x the forward
// count over the sum of the forward and backward (delta + accumulate) times.
//
// Reference rate: this machine's GEMM rate measured as every miniattn report
// measures it (src/perf/gemm_rate.hpp): KokkosBlas::gemm on N x N, random
// operands, on as many BLAS threads as the kernels' execution space has
// (OpenBLAS: set by the program unless OPENBLAS_NUM_THREADS is set), median of
// 7 after 2 warm-ups. Run with OMP_NUM_THREADS=n on an OpenMP build for n threads.
#include <Kokkos_Core.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/base/onednn_gemm.hpp"
#include "kernels/attention/cudnn/cudnn_attention.hpp"
#include "perf/blas_core.hpp"
#include "perf/gemm_rate.hpp"
#include "perfmodel/kernel_timing.hpp"
#include "relative_difference.hpp"

namespace {

using miniattn::index_t;
using miniattn::View1;
using miniattn::View2;
using miniattn::View3;
using miniattn::View4;
using miniattn::bench::relative_difference;

struct Options {
  index_t n = 8192, dh = 64, heads = 4;
  miniattn::KernelConfig tiles;  // 0: chosen per backend, as miniattn does
  bool fp32 = true, fp64 = true, bf16 = false, backward = true, cudnn_deterministic = true;
  int reps = 2;
  index_t gemm_n = 1024;
};

bool g_cpu_clock = false;
double g_worst_wall_over_cpu = 1.0;  // how much of the wall time this process did not run

// The library's fenced timings (perfmodel/kernel_timing.hpp) with this run's clock.
std::vector<double> timings(int warmups, int reps, const std::function<void()>& f) {
  return miniattn::fenced_timings(warmups, reps, f, g_cpu_clock, &g_worst_wall_over_cpu);
}

template <class T>
const char* precision_name() {
  if constexpr (std::is_same<T, miniattn::bf16>::value) return "bf16";
  return sizeof(T) == 4 ? "fp32" : "fp64";
}
template <class T>
const char* gemm_name() {
  if constexpr (std::is_same<T, miniattn::bf16>::value) return "bf16 GEMM";
  return sizeof(T) == 4 ? "SGEMM" : "DGEMM";
}

template <class T>
using Operands = miniattn::AttentionOperands<T>;

template <class T>
void forward(Operands<T>& x, bool causal, const miniattn::kernels::AttentionBlocking& blocking,
             const miniattn::kernels::AttentionWorkspace<T>& workspace) {
  miniattn::attention_forward_pass(x, causal, blocking, workspace);
}
template <class T>
void backward(Operands<T>& x, bool causal, const miniattn::kernels::AttentionBlocking& blocking,
              const miniattn::kernels::AttentionWorkspace<T>& workspace) {
  miniattn::attention_backward_pass(x, causal, blocking, workspace);
}

// The cudnn kernel checked against gemm on the same operands before it is
// timed; false when they differ by more than bf16's rounding explains.
template <class T>
bool agrees_with_gemm(const Options& o, Operands<T>& x, const miniattn::kernels::AttentionBlocking& blocking,
                      const miniattn::kernels::AttentionWorkspace<T>& workspace) {
  miniattn::KernelConfig gemm_config = o.tiles;
  gemm_config.attention = miniattn::AttentionKernel::gemm;
  const auto gemm = miniattn::kernels::choose_attention_tiles<T>(gemm_config, o.dh).blocking;
  const miniattn::kernels::AttentionWorkspace<T> gemm_workspace(x.shape(), gemm);
  bool agree = true;
  for (bool causal : {false, true}) {
    Operands<T> y(o.heads, o.n, o.dh);
    forward(x, causal, blocking, workspace);
    backward(x, causal, blocking, workspace);
    forward(y, causal, gemm, gemm_workspace);
    backward(y, causal, gemm, gemm_workspace);
    const double d[] = {relative_difference(x.out, y.out), relative_difference(x.dq, y.dq),
                        relative_difference(x.dk, y.dk), relative_difference(x.dv, y.dv)};
    const bool ok = *std::max_element(std::begin(d), std::end(d)) < 2e-2;
    std::printf("%s %-10s against gemm: relative difference out %.1e dq %.1e dk %.1e dv %.1e: %s\n",
                precision_name<T>(), causal ? "causal" : "non-causal", d[0], d[1], d[2], d[3], ok ? "ok" : "MISMATCH");
    agree = agree && ok;
  }
  return agree;
}

template <class T>
void print_blocking(const miniattn::kernels::AttentionTiles& tiles, std::size_t workspace_bytes) {
  const auto& b = tiles.blocking;
  if (b.kernel == miniattn::AttentionKernel::gemm) {
    std::printf("%s kernel gemm, chunks of %ld rows: workspace %zu B\n", precision_name<T>(), long(b.chunk),
                workspace_bytes);
  } else if (b.kernel == miniattn::AttentionKernel::cudnn) {
    std::printf("%s kernel cudnn (cuDNN %ld): workspace %zu B beside cuDNN's own\n", precision_name<T>(),
                miniattn::kernels::cudnn_version(), workspace_bytes);
  } else {
    std::printf("%s kernel fused, tiles %ldx%ld: team scratch %zu B forward, %zu B backward, level %d (level 0 holds "
                "%zu B)\n",
                precision_name<T>(), long(b.query_block), long(b.key_block), tiles.forward_scratch_bytes,
                tiles.backward_scratch_bytes, tiles.scratch_level, tiles.level0_bytes);
  }
}

// Returns false when a kernel disagrees with gemm.
template <class T>
bool run_attention(const Options& o, double gemm_gflops) {
  Operands<T> x(o.heads, o.n, o.dh);
  const char* prec = precision_name<T>();
  const int warmups = o.n >= 4096 ? 0 : 1;
  const double flops = 4.0 * double(o.n) * double(o.n) * double(o.dh) * double(o.heads);
  const miniattn::kernels::AttentionTiles tiles = miniattn::kernels::choose_attention_tiles<T>(o.tiles, o.dh);
  miniattn::kernels::AttentionBlocking blocking = tiles.blocking;
  blocking.deterministic = o.cudnn_deterministic;
  const miniattn::kernels::AttentionWorkspace<T> workspace(x.shape(), blocking);
  if (workspace.cudnn && !o.cudnn_deterministic)
    std::printf("cudnn backward: cuDNN's non-deterministic algorithm (kernels.deterministic: false)\n");
  print_blocking<T>(tiles, workspace.bytes());
  const bool checked_first = blocking.kernel == miniattn::AttentionKernel::cudnn;
  if (checked_first && !agrees_with_gemm(o, x, blocking, workspace)) return false;
  for (bool causal : {false, true}) {
    const double useful = causal ? flops / 2 : flops;
    const auto tf = timings(warmups, o.reps, [&] { forward(x, causal, blocking, workspace); });
    const double fwd = useful / tf.front() * 1e-9;
    std::printf("%s %-10s forward        %8.3f s  %7.2f GFLOP/s  %5.1f%% of %s  (spread %.2f)\n", prec,
                causal ? "causal" : "non-causal", tf.front(), fwd, 100.0 * fwd / gemm_gflops, gemm_name<T>(),
                tf.back() / tf.front());
    if (!o.backward) continue;
    const auto tb = timings(warmups, o.reps, [&] { backward(x, causal, blocking, workspace); });
    const double bwd = 2.5 * useful / tb.front() * 1e-9;
    const double both = 3.5 * useful / (tf.front() + tb.front()) * 1e-9;
    std::printf("%s %-10s backward       %8.3f s  %7.2f GFLOP/s  %5.1f%% of %s  (spread %.2f)\n", prec,
                causal ? "causal" : "non-causal", tb.front(), bwd, 100.0 * bwd / gemm_gflops, gemm_name<T>(),
                tb.back() / tb.front());
    std::printf("%s %-10s forward+backward %6.3f s  %7.2f GFLOP/s  %5.1f%% of %s\n", prec,
                causal ? "causal" : "non-causal", tf.front() + tb.front(), both, 100.0 * both / gemm_gflops,
                gemm_name<T>());
  }
  if (std::is_same<T, miniattn::bf16>::value && miniattn::kHostExecution)
    std::printf("%s GEMMs: %s\n", prec, miniattn::kernels::host_bf16_gemm_path().c_str());
  return true;
}

// The command line (CLI11): the usage at the top of this file.
Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_attention: the attention kernels against this machine's GEMM rate"};
  app.allow_extras();  // Kokkos's --kokkos-* arguments
  app.add_option("n", o.n, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("Dh", o.dh, "head width")->check(CLI::PositiveNumber);
  app.add_option("heads", o.heads, "heads")->check(CLI::PositiveNumber);
  app.add_option("query_block", o.tiles.query_block, "fused query tile (0: chosen per backend)")->check(CLI::NonNegativeNumber);
  app.add_option("key_block", o.tiles.key_block, "fused key tile (0: chosen per backend)")->check(CLI::NonNegativeNumber);
  std::string kernel = "auto", precision = "both", clock = "wall";
  app.add_option("--kernel", kernel, "kernels.attention")->check(CLI::IsMember(miniattn::enum_names<miniattn::AttentionKernel>()));
  app.add_option("--chunk", o.tiles.chunk, "gemm chunk rows (0: chosen per backend)")->check(CLI::NonNegativeNumber);
  app.add_option("--precision", precision, "fp32, fp64, bf16 or both (fp32 and fp64)")
      ->check(CLI::IsMember({"fp32", "fp64", "bf16", "both"}));
  app.add_option("--reps", o.reps, "timed repeats, best of them")->check(CLI::PositiveNumber);
  app.add_option("--gemm", o.gemm_n, "reference GEMM size N (N x N x N)")->check(CLI::PositiveNumber);
  app.add_option("--clock", clock, "wall or cpu")->check(CLI::IsMember({"wall", "cpu"}));
  bool forward_only = false, nondeterministic = false;
  app.add_flag("--no-backward", forward_only, "forward only");
  app.add_flag("--cudnn-nondeterministic", nondeterministic, "cuDNN's non-deterministic backward (--kernel=cudnn)");
  try {
    app.parse(argc, argv);
    for (const std::string& extra : app.remaining())
      if (extra.rfind("--kokkos", 0) != 0) throw CLI::ExtrasError({extra});
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);  // --help, or bad input: exit 2 as miniattn does
  }
  o.tiles.attention = miniattn::enum_of_word<miniattn::AttentionKernel>(kernel);
  if (nondeterministic && o.tiles.attention != miniattn::AttentionKernel::cudnn) {
    std::fprintf(stderr, "bench_attention: --cudnn-nondeterministic needs --kernel=cudnn (got --kernel=%s)\n",
                 kernel.c_str());
    std::exit(2);
  }
  o.cudnn_deterministic = !nondeterministic;
  o.fp32 = precision == "fp32" || precision == "both";
  o.fp64 = precision == "fp64" || precision == "both";
  o.bf16 = precision == "bf16";
  o.backward = !forward_only;
  g_cpu_clock = clock == "cpu";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  miniattn::restart_with_cpu_blas_core(argv);
  const Options o = parse(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  miniattn::match_blas_threads_to_kokkos();
  std::printf("execution space: %s, concurrency %d\n", miniattn::ExecSpace::name(),
              int(miniattn::ExecSpace().concurrency()));
  const miniattn::BlasInfo blas = miniattn::blas_info();
  std::printf("BLAS: %s, kernels %s (chosen by %s), %d threads\n", blas.library.c_str(),
              blas.core.empty() ? "?" : blas.core.c_str(), blas.core_chosen_by.c_str(), blas.threads);
  if (!blas.warning.empty()) std::printf("warning: %s\n", blas.warning.c_str());
  std::printf("problem: B=1 H=%ld n=%ld Dh=%ld, best of %d, %s time\n", long(o.heads), long(o.n), long(o.dh), o.reps,
              g_cpu_clock ? "CPU" : "wall-clock");
  const double sgemm = o.fp32 ? miniattn::measure_gemm_flops<float>(o.gemm_n) * 1e-9 : 0.0;
  const double dgemm = o.fp64 ? miniattn::measure_gemm_flops<double>(o.gemm_n) * 1e-9 : 0.0;
  auto of_peak = [](double gflops, std::size_t scalar_bytes) {
    const miniattn::CorePeak peak = miniattn::core_peak(scalar_bytes);
    if (!peak.known) return std::string();
    char text[300];
    std::snprintf(text, sizeof text, ", %.0f%% of the FMA peak %.1f GFLOP/s (%s)", 100.0 * gflops * 1e9 / peak.flops(),
                  peak.flops() * 1e-9, peak.assumption.c_str());
    return std::string(text);
  };
  if (o.fp32)
    std::printf("SGEMM %ld^3: %7.2f GFLOP/s (median of 7)%s\n", long(o.gemm_n), sgemm, of_peak(sgemm, 4).c_str());
  if (o.fp64)
    std::printf("DGEMM %ld^3: %7.2f GFLOP/s (median of 7)%s\n", long(o.gemm_n), dgemm, of_peak(dgemm, 8).c_str());
  const double bf16_gemm = o.bf16 ? miniattn::measure_gemm_flops<miniattn::bf16>(o.gemm_n) * 1e-9 : 0.0;
  if (o.bf16) std::printf("bf16 GEMM %ld^3: %7.2f GFLOP/s (median of 7)\n", long(o.gemm_n), bf16_gemm);
  bool agree = true;
  try {
    if (o.fp32) agree = run_attention<float>(o, sgemm) && agree;
    if (o.fp64) agree = run_attention<double>(o, dgemm) && agree;
    if (o.bf16) agree = run_attention<miniattn::bf16>(o, bf16_gemm) && agree;
  } catch (const miniattn::InputError& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 2;
  }
  if (!g_cpu_clock && g_worst_wall_over_cpu > 1.15)
    std::printf("note: some timed runs took up to %.1fx more wall-clock than CPU time: the core is shared with other "
                "work and wall-clock rates (and their ratios to the GEMM rate) are unreliable; --clock=cpu counts "
                "only the time this process ran\n",
                g_worst_wall_over_cpu);
  return agree ? 0 : 1;
}
