// The runner of this build (cudnn_attention.hpp: default_sdpa_runner): cuDNN's
// fused attention on the default execution space's CUDA stream, so that its
// calls and the Kokkos kernels that merge their outputs run in order.
#include "kernels/attention/cudnn/cudnn_attention.hpp"

#include <string>

#if defined(MINIATTN_HAVE_CUDNN) && defined(KOKKOS_ENABLE_CUDA)
#include "kernels/attention/cudnn/cudnn_graphs.hpp"
#define MINIATTN_CUDNN_RUNNER 1
#endif

namespace miniattn::kernels {

#ifdef MINIATTN_CUDNN_RUNNER
namespace {

class CudnnRunner final : public SdpaRunner {
 public:
  explicit CudnnRunner(bool deterministic_backward) : sdpa_(ExecSpace().cuda_stream(), deterministic_backward) {}
  std::size_t workspace_needed(const SdpaCallShape& shape, bool backward) override {
    return sdpa_.prepare(shape, backward);
  }
  void forward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, void* out, float* stats,
               void* workspace) override {
    sdpa_.forward(shape, q, k, v, out, stats, workspace);
  }
  void backward(const SdpaCallShape& shape, const void* q, const void* k, const void* v, const void* out,
                const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace) override {
    sdpa_.backward(shape, q, k, v, out, dout, lse, dq, dk, dv, workspace);
  }
  int graphs_built() const override { return sdpa_.graphs_built(); }

 private:
  CudnnSdpa sdpa_;
};

}  // namespace
#endif

std::string cudnn_unavailable_reason_for(index_t head_dim) {
  if (head_dim % 8 != 0 || head_dim > 256)
    return "the head width (model.d_model / model.heads) must be a multiple of 8 and at most 256, got " +
           std::to_string(head_dim);
#ifdef MINIATTN_CUDNN_RUNNER
  return cudnn_unavailable_reason();
#else
  return "this build of miniattn has no cuDNN (a CUDA build configured with -DMINIATTN_ENABLE_CUDNN=ON)";
#endif
}

long cudnn_version() {
#ifdef MINIATTN_CUDNN_RUNNER
  return cudnn_library_version();
#else
  return 0;
#endif
}

// One runner a process and backward algorithm: its graphs serve every layer
// and strategy. Its cuDNN handle goes before Kokkos finalizes.
std::shared_ptr<SdpaRunner> default_sdpa_runner(bool deterministic_backward) {
#ifdef MINIATTN_CUDNN_RUNNER
  static std::shared_ptr<SdpaRunner> runners[2];
  std::shared_ptr<SdpaRunner>& runner = runners[deterministic_backward ? 1 : 0];
  if (!runner) {
    runner = std::make_shared<CudnnRunner>(deterministic_backward);
    Kokkos::push_finalize_hook([&runner] { runner.reset(); });
  }
  return runner;
#else
  (void)deterministic_backward;
  return nullptr;
#endif
}

}  // namespace miniattn::kernels
