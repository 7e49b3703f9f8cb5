#pragma once
// A host emulation of cuDNN's fused attention as the cudnn kernel calls it
// (src/kernels/attention/cudnn/sdpa_runner.hpp), written from cuDNN's
// documented contract and independently of the kernel: per call, the scores
// scale q k^T of the call's rows that its band shows (call_shows), fp32 math
// over bf16 inputs, and P and dS rounded to bf16 where they enter a product
// (FlashAttention-2 on tensor cores does); forward: the normalised output rounded to bf16 and the
// natural-log LSE; backward from the GLOBAL output and LSE given:
//   D = rowsum(dO O), P = exp(S - lse), dV = P^T dO, dS = P (dO V^T - D),
//   dQ = scale dS K, dK = scale dS^T Q (dK, dV summed over a K/V head's
//   group of query heads), each rounded once to bf16.
// With it the planner, the merges and the fallback run in CPU builds.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "core/types.hpp"
#include "kernels/attention/cudnn/sdpa_runner.hpp"

namespace miniattn::testing {

class EmulatedSdpa final : public kernels::SdpaRunner {
 public:
  // What cudnn-frontend 1.23 sizes a backward graph's workspace to
  // (scaled_dot_product_flash_attention.h; 256 bytes more, as an H200
  // measured): the deterministic dP-workspace path keeps a bf16 dS of every
  // pair, rows and keys rounded up to 64; the other an fp32 dQ accumulator;
  // both an fp32 softmax sum a row. extra_bytes: a need beyond that (a test of
  // what the kernel does when cuDNN asks for more than the plan counted).
  explicit EmulatedSdpa(bool deterministic = true, std::size_t extra_bytes = 0)
      : deterministic_(deterministic), extra_bytes_(extra_bytes) {}
  std::size_t workspace_needed(const kernels::SdpaCallShape& s, bool backward) override {
    if (!backward) return 0;
    const auto up64 = [](index_t x) { return static_cast<std::size_t>((x + 63) / 64 * 64); };
    const std::size_t rows = static_cast<std::size_t>(s.batch * s.heads), q = static_cast<std::size_t>(s.call.query_count);
    const std::size_t main = deterministic_ ? rows * up64(s.call.query_count) * up64(s.call.key_count) * 2
                                            : rows * q * static_cast<std::size_t>(s.head_dim) * 4;
    return main + rows * q * 4 + 256 + extra_bytes_;
  }

  void forward(const kernels::SdpaCallShape& s, const void* q, const void* k, const void* v, void* out,
               float* stats, void*) override {
    require_host();
    const Tensors t{s, q, k, v};
    for (index_t b = 0; b < s.batch; ++b)
      for (index_t h = 0; h < s.heads; ++h)
        for (index_t i = 0; i < s.call.query_count; ++i) forward_row(t, b, h, i, bits(out), stats);
  }

  void backward(const kernels::SdpaCallShape& s, const void* q, const void* k, const void* v, const void* out,
                const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace) override {
    require_host();
    if (s.call.query_count == 1 && s.call.key_count == 1)  // cuDNN 9.19 on Hopper: "s_q = s_kv = 1" unsupported
      throw std::logic_error("cuDNN's backward refuses a call of one query and one key");
    if (workspace == nullptr) throw std::logic_error("cuDNN's backward needs its workspace");
    const Tensors t{s, q, k, v};
    std::vector<double> dk_sum(key_values(s), 0.0), dv_sum(key_values(s), 0.0);
    for (index_t b = 0; b < s.batch; ++b)
      for (index_t h = 0; h < s.heads; ++h)
        for (index_t i = 0; i < s.call.query_count; ++i)
          backward_row(t, b, h, i, {bits(out), bits(dout), lse, bits(dq)}, dk_sum, dv_sum);
    for (index_t b = 0; b < s.batch; ++b)
      for (index_t g = 0; g < s.kv_heads; ++g)
        for (index_t j = 0; j < s.call.key_count; ++j)
          for (index_t d = 0; d < s.head_dim; ++d) {
            const std::size_t e = key_sum_index(s, b, g, j, d);
            bits(dk)[t.key(b, g, j, d)] = bf16(static_cast<float>(dk_sum[e] * t.scale)).bits;
            bits(dv)[t.key(b, g, j, d)] = bf16(static_cast<float>(dv_sum[e])).bits;
          }
  }

 private:
  // Element indices of a call's row i / key row j in the block's tensors.
  struct Tensors {
    kernels::SdpaCallShape s;
    const void *q, *k, *v;
    double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    // b: the call's sample b (a call of one sample reads that sample's rows).
    index_t sample(index_t b) const { return s.call.sample < 0 ? b : s.call.sample + b; }
    std::size_t query(index_t b, index_t h, index_t i, index_t d) const {
      return static_cast<std::size_t>(((sample(b) * s.heads + h) * s.query_rows + s.call.query_offset + i) *
                                          s.head_dim + d);
    }
    std::size_t key(index_t b, index_t g, index_t j, index_t d) const {
      return static_cast<std::size_t>(((sample(b) * s.kv_heads + g) * s.key_rows + s.call.key_offset + j) *
                                          s.head_dim + d);
    }
    std::size_t row(index_t b, index_t h, index_t i) const {  // stats and lse: the call's rows only
      return static_cast<std::size_t>((b * s.heads + h) * s.call.query_count + i);
    }
    index_t kv_head(index_t h) const { return h / (s.heads / s.kv_heads); }
    bool shows(index_t i, index_t j) const {
      return kernels::call_shows(s.call, s.call.query_offset + i, s.call.key_offset + j);
    }
    double score(index_t b, index_t h, index_t i, index_t j) const {
      double sum = 0.0;
      for (index_t d = 0; d < s.head_dim; ++d) sum += value(q, query(b, h, i, d)) * value(k, key(b, kv_head(h), j, d));
      return static_cast<double>(static_cast<float>(sum * scale));
    }
  };
  struct RowGradients {
    const std::uint16_t *out, *dout;
    const float* lse;
    std::uint16_t* dq;
  };

  bool deterministic_;
  std::size_t extra_bytes_;

  static void require_host() {
    if (!kHostExecution) throw std::logic_error("EmulatedSdpa reads host memory: host backends only");
  }
  static std::uint16_t* bits(void* p) { return static_cast<std::uint16_t*>(p); }
  static const std::uint16_t* bits(const void* p) { return static_cast<const std::uint16_t*>(p); }
  static double to_bf16(double x) { return static_cast<float>(bf16(static_cast<float>(x))); }
  static double value(const void* p, std::size_t e) { return static_cast<float>(bf16::from_bits(bits(p)[e])); }
  static std::size_t key_values(const kernels::SdpaCallShape& s) {
    return static_cast<std::size_t>(s.batch * s.kv_heads * s.call.key_count * s.head_dim);
  }
  static std::size_t key_sum_index(const kernels::SdpaCallShape& s, index_t b, index_t g, index_t j, index_t d) {
    return static_cast<std::size_t>(((b * s.kv_heads + g) * s.call.key_count + j) * s.head_dim + d);
  }

  static void forward_row(const Tensors& t, index_t b, index_t h, index_t i, std::uint16_t* out, float* stats) {
    const kernels::SdpaCallShape& s = t.s;
    double m = -INFINITY;
    for (index_t j = 0; j < s.call.key_count; ++j)
      if (t.shows(i, j)) m = std::max(m, t.score(b, h, i, j));
    if (m == -INFINITY) throw std::logic_error("a planned call has a query row that sees no key");
    double l = 0.0;
    std::vector<double> o(static_cast<std::size_t>(s.head_dim), 0.0);
    for (index_t j = 0; j < s.call.key_count; ++j) {
      if (!t.shows(i, j)) continue;
      const double p = std::exp(t.score(b, h, i, j) - m);
      l += p;
      const double p_rounded = to_bf16(p);  // P V runs on bf16 tensor cores
      for (index_t d = 0; d < s.head_dim; ++d)
        o[static_cast<std::size_t>(d)] += p_rounded * value(t.v, t.key(b, t.kv_head(h), j, d));
    }
    for (index_t d = 0; d < s.head_dim; ++d)
      out[t.query(b, h, i, d)] = bf16(static_cast<float>(o[static_cast<std::size_t>(d)] / l)).bits;
    stats[t.row(b, h, i)] = static_cast<float>(m + std::log(l));
  }

  static void backward_row(const Tensors& t, index_t b, index_t h, index_t i, const RowGradients& r,
                           std::vector<double>& dk_sum, std::vector<double>& dv_sum) {
    const kernels::SdpaCallShape& s = t.s;
    const index_t g = t.kv_head(h);
    double delta = 0.0;
    for (index_t d = 0; d < s.head_dim; ++d)
      delta += value(r.dout, t.query(b, h, i, d)) * value(r.out, t.query(b, h, i, d));
    std::vector<double> dq(static_cast<std::size_t>(s.head_dim), 0.0);
    for (index_t j = 0; j < s.call.key_count; ++j) {
      if (!t.shows(i, j)) continue;
      const double p = std::exp(t.score(b, h, i, j) - r.lse[t.row(b, h, i)]);
      double dp = 0.0;
      for (index_t d = 0; d < s.head_dim; ++d) dp += value(r.dout, t.query(b, h, i, d)) * value(t.v, t.key(b, g, j, d));
      const double ds = to_bf16(p * (dp - delta)), p_rounded = to_bf16(p);  // bf16 operands of the products
      for (index_t d = 0; d < s.head_dim; ++d) {
        dq[static_cast<std::size_t>(d)] += ds * value(t.k, t.key(b, g, j, d));
        dk_sum[key_sum_index(s, b, g, j, d)] += ds * value(t.q, t.query(b, h, i, d));
        dv_sum[key_sum_index(s, b, g, j, d)] += p_rounded * value(r.dout, t.query(b, h, i, d));
      }
    }
    for (index_t d = 0; d < s.head_dim; ++d)
      r.dq[t.query(b, h, i, d)] = bf16(static_cast<float>(dq[static_cast<std::size_t>(d)] * t.scale)).bits;
  }
};

}  // namespace miniattn::testing
