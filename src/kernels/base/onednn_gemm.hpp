#pragma once
// bf16 GEMMs on the host with the core's bf16 arithmetic: oneDNN's matmul
// (bf16 operands, fp32 accumulation, C in fp32 or rounded once to bf16),
// which dispatches to AMX or AVX512-BF16 where the core has them and to its
// own conversion kernels where it does not. batched_gemm's host bf16 path
// takes it in builds with oneDNN (MINIATTN_HAVE_ONEDNN); without it, it
// widens the operands to fp32 for the fp32 BLAS (OpenBLAS as Debian 12 builds
// it has no sbgemm).
//
// Every call runs on one thread: oneDNN may split a product's inner
// dimension over threads and reduce the parts, which would make the bits
// depend on the thread count. The ranks are the parallelism, as for the
// fp32 BLAS (OPENBLAS_NUM_THREADS=1).
#include <string>

#include "kernels/base/batched_gemm.hpp"

namespace miniattn::kernels {

// Whether this build has oneDNN.
bool onednn_bf16_gemm_built();

// Whether host bf16 GEMMs go through oneDNN: a build with it, on a core whose
// bf16 units oneDNN uses (its effective ISA, which ONEDNN_MAX_CPU_ISA may
// cap). Elsewhere oneDNN 2.6's bf16 matmul converts in software, 4x slower
// than widening for the fp32 BLAS (AVX-512 without bf16), or has no kernel
// at all (AVX2).
bool onednn_bf16_gemm_used();

// Whether those GEMMs run on AMX tiles (onednn_bf16_gemm_used on a core
// with AMX that ONEDNN_MAX_CPU_ISA leaves to oneDNN).
bool onednn_bf16_gemm_on_amx();

// What computes host bf16 GEMMs in this build, in words for the report:
// oneDNN's version and the implementation it chose for the last product
// (e.g. "brg:avx512_core_amx_bf16"), or the widened fp32 BLAS and why.
std::string host_bf16_gemm_path();

// C_i = alpha op(A_i) op(B_i) + beta C_i through oneDNN (only in builds with
// it: onednn_bf16_gemm_built()). Shapes as batched_gemm has checked them; k > 0.
template <class C>
void onednn_bf16_batch(char trans_a, char trans_b, float alpha, const MatrixBatch<const bf16>& a,
                       const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count);

}  // namespace miniattn::kernels
