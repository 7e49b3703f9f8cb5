#include "kernels/attention/kernel_record.hpp"

#include <stdexcept>

namespace miniattn::kernels {

namespace {

constexpr unsigned kAnyBackend = bits_of(Backend::host, Backend::cuda, Backend::hip);

std::string kernels_computing(Precision precision) {
  std::string names;
  for (const AttentionKernelRecord& r : attention_kernel_records())
    if (r.computes(precision)) names += std::string(names.empty() ? "" : ", ") + to_string(r.kernel);
  return names;
}

}  // namespace

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::host: return "host";
    case Backend::cuda: return "CUDA";
    case Backend::hip: return "HIP";
  }
  return "?";
}

// A function-local table: hip-clang would emit a namespace-scope one for the device too.
const AttentionKernelRecord (&attention_kernel_records())[3] {
  // The measurements behind auto's grounds are in docs/results/.
  static const AttentionKernelRecord records[3] = {
      {AttentionKernel::fused, bits_of(Precision::fp32, Precision::fp64, Precision::bf16), kAnyBackend,
       bit_of(Backend::host), bit_of(Backend::host), "fused (tiled attention with an online softmax)",
       "on CPUs its tiles stay in cache and it outruns gemm (bf16: where the core has bf16 dot products, "
       "AVX512-BF16, which its products run on, and no AMX, which gemm's GEMMs would); on GPUs level-0 scratch (48 KiB per CUDA block, "
       "64 KiB of LDS per AMD workgroup) caps its tiles, and gemm's products run at the BLAS's rate"},
      {AttentionKernel::cudnn, bit_of(Precision::bf16), bit_of(Backend::cuda), bit_of(Backend::cuda),
       bit_of(Backend::cuda), "cudnn (cuDNN's fused attention per block)",
       "bf16 on CUDA where cuDNN loads on every rank: on an H200 its forward+backward ran at 300.6 (full) and "
       "296.1 (causal) TFLOP/s against gemm's 46.9 and 40.7, the bf16 step in 0.022 s against 0.103 s"},
      {AttentionKernel::gemm, bits_of(Precision::fp32, Precision::fp64, Precision::bf16), kAnyBackend, kAnyBackend,
       kAnyBackend, "gemm (chunked, through batched GEMMs)",
       "every precision on every backend: auto's choice wherever fused and cudnn are not (fp32 and fp64 on "
       "GPUs, bf16 on CPUs without bf16 dot products or with AMX, on AMD GPUs and where cuDNN does not load)"},
  };
  return records;
}

const AttentionKernelRecord& attention_kernel_record(AttentionKernel kernel) {
  for (const AttentionKernelRecord& r : attention_kernel_records())
    if (r.kernel == kernel) return r;
  throw std::logic_error(std::string("attention_kernel_record: no record for kernels.attention ") + to_string(kernel));
}

AttentionKernel auto_attention_kernel(Precision precision, Backend backend,
                                      const std::function<bool(AttentionKernel)>& usable) {
  for (const AttentionKernelRecord& r : attention_kernel_records())
    if (r.auto_takes(precision, backend) && (!usable || usable(r.kernel))) return r.kernel;
  throw std::logic_error(std::string("auto_attention_kernel: no kernel auto may take for ") + to_string(precision) +
                         " on " + to_string(backend));
}

std::string attention_kernel_precision_refusal(AttentionKernel kernel, Precision precision) {
  if (kernel == AttentionKernel::automatic) return "";
  const AttentionKernelRecord& r = attention_kernel_record(kernel);
  if (r.computes(precision)) return "";
  const std::string name = to_string(kernel), p = to_string(precision);
  const std::string what = r.precisions == bit_of(Precision::bf16) ? "the " + name + " kernel computes bf16 only"
                                                                   : "the " + name + " kernel has no " + p + " version";
  return what + "; for model.precision " + p + " use " + kernels_computing(precision) + " or auto";
}

std::string attention_kernel_backend_refusal(AttentionKernel kernel, Precision precision, Backend backend) {
  if (kernel == AttentionKernel::automatic) return "";
  const AttentionKernelRecord& r = attention_kernel_record(kernel);
  if (r.computes_on(precision, backend)) return "";
  std::string where;
  for (const Backend b : {Backend::host, Backend::cuda, Backend::hip})
    if (r.computes_on(precision, b)) where += std::string(where.empty() ? "" : " and ") + to_string(b);
  return "the " + std::string(to_string(kernel)) + " kernel computes " + to_string(precision) + " on " + where +
         " backends only, and this build runs on " + to_string(backend);
}

}  // namespace miniattn::kernels
