// The bf16 batched GEMM path of devices without a bf16 BLAS (HIP:
// kernels::batched_gemm_bf16_widened, operands widened to fp32 in the
// execution space's memory), run here on the host against a float64
// reference and against the host path (batched_gemm: oneDNN in builds with
// it, else the fp32 BLAS on widened blocks), for every operand layout chunked
// attention uses, bf16 and fp32 C, beta 0 and 1, padded and unpadded strides,
// and limits that force its grouped and its row-block paths. And which host
// path bf16 takes: oneDNN only where the core has bf16 units.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernel_test_util.hpp"
#include "kernels/base/batched_gemm.hpp"
#include "kernels/base/onednn_gemm.hpp"

namespace miniattn::ktest {
namespace {

using kernels::MatrixBatch;

struct Case {
  char ta, tb;
  index_t m, n, k, count;
};

// Matrix i of x as a row-major [rows x cols] block at i * stride.
double at(const HostVec& x, index_t stride, index_t cols, index_t i, index_t r, index_t c) {
  return x[static_cast<std::size_t>(i * stride + r * cols + c)];
}

// C_i = alpha op(A_i) op(B_i) + beta C_i in float64.
HostVec reference(const Case& s, double alpha, const HostVec& a, index_t a_cols, index_t sa, const HostVec& b,
                  index_t b_cols, index_t sb, double beta, HostVec c, index_t sc) {
  for (index_t i = 0; i < s.count; ++i)
    for (index_t r = 0; r < s.m; ++r)
      for (index_t col = 0; col < s.n; ++col) {
        double sum = 0;
        for (index_t t = 0; t < s.k; ++t) {
          const double x = s.ta == 'T' ? at(a, sa, a_cols, i, t, r) : at(a, sa, a_cols, i, r, t);
          const double y = s.tb == 'T' ? at(b, sb, b_cols, i, col, t) : at(b, sb, b_cols, i, t, col);
          sum += x * y;
        }
        double& out = c[static_cast<std::size_t>(i * sc + r * s.n + col)];
        out = alpha * sum + beta * out;
      }
  return c;
}

// padded: gaps between the matrices of a batch (as a chunk's rows of every
// head have), else none (oneDNN takes such a batch in one call: onednn_gemm.cpp).
template <class C>
void expect_widened_path_matches(const Case& s, float beta, index_t widened_values, Random& rng, bool padded = true) {
  const index_t a_rows = s.ta == 'T' ? s.k : s.m, a_cols = s.ta == 'T' ? s.m : s.k;
  const index_t b_rows = s.tb == 'T' ? s.n : s.k, b_cols = s.tb == 'T' ? s.k : s.n;
  const index_t gap = padded ? 1 : 0;
  const index_t sa = a_rows * a_cols + 3 * gap, sb = b_rows * b_cols + 5 * gap, sc = s.m * s.n + 2 * gap;
  const HostVec a = quantize<bf16>(rng.uniform(static_cast<std::size_t>(s.count * sa), -1, 1));
  const HostVec b = quantize<bf16>(rng.uniform(static_cast<std::size_t>(s.count * sb), -1, 1));
  const HostVec c0 = quantize<C>(rng.uniform(static_cast<std::size_t>(s.count * sc), -1, 1));
  const View1<bf16> av = to_view1<bf16>("a", a), bv = to_view1<bf16>("b", b);
  const View1<C> widened = to_view1<C>("c", c0), host = to_view1<C>("c_host", c0);
  const MatrixBatch<const bf16> ab{av.data(), a_rows, a_cols, sa}, bb{bv.data(), b_rows, b_cols, sb};
  const float alpha = 0.75f;
  kernels::batched_gemm_bf16_widened<C>(s.ta, s.tb, alpha, ab, bb, beta, MatrixBatch<C>{widened.data(), s.m, s.n, sc},
                                        s.count, widened_values);
  kernels::batched_gemm<bf16, C>(s.ta, s.tb, alpha, ab, bb, beta, MatrixBatch<C>{host.data(), s.m, s.n, sc}, s.count);
  const HostVec want = reference(s, alpha, a, a_cols, sa, b, b_cols, sb, beta, c0, sc);
  // Padding between matrices must be left alone: the reference leaves it at c0.
  const double tolerance = std::is_same<C, float>::value ? 1e-5 : 1.0 / 128;  // fp32 sums; one bf16 rounding
  const std::string what = std::string(1, s.ta) + std::string(1, s.tb) + " beta " + std::to_string(beta) +
                           " limit " + std::to_string(widened_values) + " count " + std::to_string(s.count);
  EXPECT_LT(rel_error(to_host(widened), want), tolerance) << what;
  EXPECT_LT(rel_error(to_host(widened), to_host(host)), tolerance) << what << " (against the host path)";
}

TEST(BatchedGemmBf16Widened, MatchesTheReferenceAndTheHostPath) {
  Random rng(2026);
  // The layouts of chunked attention: S = Q K^T (NT), O += P V (NN), dK += dS^T Q and dV += P^T dO (TN).
  const Case cases[] = {{'N', 'T', 7, 9, 16, 1}, {'N', 'N', 7, 16, 9, 5}, {'T', 'N', 9, 16, 7, 5}, {'N', 'T', 33, 5, 8, 3}};
  for (const Case& s : cases)
    for (const float beta : {0.0f, 1.0f})
      for (const index_t limit : {kernels::kDeviceWidenedValues, index_t(2000), index_t(40)}) {
        expect_widened_path_matches<bf16>(s, beta, limit, rng);
        expect_widened_path_matches<float>(s, beta, limit, rng);
      }
  for (const Case& s : cases)
    for (const float beta : {0.0f, 1.0f}) {
      expect_widened_path_matches<bf16>(s, beta, kernels::kDeviceWidenedValues, rng, /*padded=*/false);
      expect_widened_path_matches<float>(s, beta, kernels::kDeviceWidenedValues, rng, /*padded=*/false);
    }
}

// Whether ONEDNN_MAX_CPU_ISA caps oneDNN below bf16 units (ctest runs this
// test once more with AVX2: test_kernels.bf16_without_bf16_units).
bool isa_capped_below_bf16() {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string isa = cap ? cap : "";
  for (const char* below : {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"})
    if (isa == below) return true;
  return false;
}

// The compiler's own CPUID test, independent of oneDNN's ISA query.
bool core_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

TEST(HostBf16Gemm, TakesOneDnnOnlyOnCoresWithBf16Units) {
  if (!kHostExecution) GTEST_SKIP() << "the device's BLAS computes bf16 here";
  const bool bf16_units = core_has_avx512_bf16() && !isa_capped_below_bf16();
  const bool expected = kernels::onednn_bf16_gemm_built() && bf16_units;
  EXPECT_EQ(kernels::onednn_bf16_gemm_used(), expected);
  const std::string path = kernels::host_bf16_gemm_path();
  EXPECT_EQ(path.find("widened") == std::string::npos, expected) << path;
}

}  // namespace
}  // namespace miniattn::ktest
