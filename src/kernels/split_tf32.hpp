#pragma once
// fp32 products on TF32 tensor cores with fp32's accuracy ("3xTF32": Ootomo and
// Yokota 2022; CUTLASS's 3xTF32 GEMMs; the arithmetic of PyTorch's fp32
// memory-efficient attention on NVIDIA GPUs). A tensor core reads an fp32
// operand as TF32, 10 fraction bits, dropping 13. Split each operand
// x = big + small, big = x rounded to TF32 (exact on the tensor cores, whatever
// rounding the library applies to its inputs), small = x - big (exact in fp32,
// |small| <= 2^-11 |x|); then
//   A B = big_A big_B + big_A small_B + small_A big_B + small_A small_B,
// of which the last is below 2^-22 |A||B| and is dropped, and the tensor cores'
// TF32 reading of `small` costs below 2^-11 of it: about fp32's own rounding.
#include <cstdint>
#include <cstring>

#include "core/types.hpp"

namespace miniattn::kernels {

// Where the split pays (kernels.fp32_gemm auto): cuBLAS's TF32 tensor cores.
#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kTf32TensorCores = true;
#else
constexpr bool kTf32TensorCores = false;
#endif

// x rounded to TF32 (round to nearest even, as an fp32 with the low 13 bits clear).
KOKKOS_INLINE_FUNCTION float tf32_big(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN: as they are
  u += 0xfffu + ((u >> 13) & 1u);                   // a carry into the exponent rounds up to the next binade
  u &= 0xffffe000u;
  float big;
  std::memcpy(&big, &u, sizeof big);
  return big;
}

// The workspace elements a split product needs: the big and small parts of
// its A and of its B (a_elements, b_elements: count x rows x cols of each).
inline index_t split_operand_elements(index_t a_elements, index_t b_elements) { return 2 * (a_elements + b_elements); }

// Where batched_gemm writes split operands; empty: fp32 products as they are.
struct SplitScratch {
  float* data = nullptr;
  index_t elements = 0;
};

}  // namespace miniattn::kernels
