// The choice of OpenBLAS kernels against the CPU's level (perf/blas_core.hpp):
// a core below the CPU's flags is replaced by the CPU's own, and no other.
#include <gtest/gtest.h>

#include "perf/blas_core.hpp"

namespace miniattn {
namespace {

TEST(BlasCore, CoreNamesHaveTheLevelOfTheirKernels) {
  EXPECT_EQ(openblas_core_level("SkylakeX"), VectorLevel::avx512);
  EXPECT_EQ(openblas_core_level("Cooperlake"), VectorLevel::avx512);  // as openblas_get_corename() spells it
  EXPECT_EQ(openblas_core_level("Haswell"), VectorLevel::avx2_fma);
  EXPECT_EQ(openblas_core_level("Zen"), VectorLevel::avx2_fma);
  EXPECT_EQ(openblas_core_level("Prescott"), VectorLevel::older);
  EXPECT_EQ(openblas_core_level("Sandybridge"), VectorLevel::older);
  EXPECT_EQ(openblas_core_level("neoversen1"), VectorLevel::unknown);
}

TEST(BlasCore, ACoreBelowTheCpuIsReplacedByTheCpusOwn) {
  // The Xeon VM whose CPU has no model name: Prescott on AVX-512.
  EXPECT_EQ(openblas_core_to_force("Prescott", VectorLevel::avx512), "SkylakeX");
  // OpenBLAS 0.3.21 on AMD Zen 4/5: its AVX2 kernels.
  EXPECT_EQ(openblas_core_to_force("Zen", VectorLevel::avx512), "SkylakeX");
  EXPECT_EQ(openblas_core_to_force("Haswell", VectorLevel::avx512), "SkylakeX");
  EXPECT_EQ(openblas_core_to_force("Prescott", VectorLevel::avx2_fma), "Haswell");
}

TEST(BlasCore, ACoreOfTheCpusLevelOrAnUnknownOneIsKept) {
  EXPECT_EQ(openblas_core_to_force("SkylakeX", VectorLevel::avx512), "");
  EXPECT_EQ(openblas_core_to_force("Cooperlake", VectorLevel::avx512), "");
  EXPECT_EQ(openblas_core_to_force("Haswell", VectorLevel::avx2_fma), "");
  EXPECT_EQ(openblas_core_to_force("SkylakeX", VectorLevel::avx2_fma), "");  // a forced wider core: the user's call
  EXPECT_EQ(openblas_core_to_force("Prescott", VectorLevel::older), "");
  EXPECT_EQ(openblas_core_to_force("neoversen1", VectorLevel::avx512), "");
  EXPECT_EQ(openblas_core_to_force("", VectorLevel::avx512), "");
}

}  // namespace
}  // namespace miniattn
