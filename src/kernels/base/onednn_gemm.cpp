// Host bf16 GEMMs through oneDNN's matmul (onednn_gemm.hpp).
#include "kernels/base/onednn_gemm.hpp"

#include <stdexcept>
#include <type_traits>

#ifdef MINIATTN_HAVE_ONEDNN
#include <omp.h>

#include <map>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace miniattn::kernels {

#ifdef MINIATTN_HAVE_ONEDNN
namespace {

using dnnl::memory;

bool transposed(char trans) { return trans == 'T' || trans == 't'; }

// Everything that makes a primitive: oneDNN builds one per shape, layout and
// scaling (a few milliseconds), so they are kept for the process.
using ProductKey = std::tuple<char, char, index_t, index_t, index_t, index_t, index_t, index_t, index_t, index_t,
                              index_t, bool, float, float>;

// A primitive and its three memory objects, whose data handles each call sets.
struct Product {
  dnnl::matmul matmul;
  memory a, b, c;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

std::string& last_implementation() {
  static std::string name;
  return name;
}

// oneDNN's OpenMP runtime takes omp_get_max_threads() threads, when it plans
// a primitive and when it runs one: one, for the duration of the guard.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// op(X) of matrices stored row-major (`cols` a row, `stride` from one to the
// next) as a [count, rows, cols] descriptor of op(X)'s own rows and columns.
memory::desc operand(index_t count, index_t op_rows, index_t op_cols, index_t stride, index_t stored_cols,
                     bool is_transposed, memory::data_type type) {
  const index_t matrix = count > 1 ? stride : op_rows * op_cols;  // one matrix: any stride will do
  const memory::dims strides = is_transposed ? memory::dims{matrix, 1, stored_cols}
                                             : memory::dims{matrix, stored_cols, 1};
  return memory::desc({count, op_rows, op_cols}, type, strides);
}

template <class C>
Product make_product(char ta, char tb, float alpha, const MatrixBatch<const bf16>& a,
                     const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count) {
  const index_t m = c.rows, n = c.cols, k = transposed(ta) ? a.rows : a.cols;
  const memory::desc ad = operand(count, m, k, a.stride, a.cols, transposed(ta), memory::data_type::bf16);
  const memory::desc bd = operand(count, k, n, b.stride, b.cols, transposed(tb), memory::data_type::bf16);
  const memory::desc cd = operand(count, m, n, c.stride, c.cols, false,
                                  std::is_same<C, float>::value ? memory::data_type::f32 : memory::data_type::bf16);
  dnnl::primitive_attr attributes;
  if (alpha != 1.0f) attributes.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops accumulate;
    accumulate.append_sum(beta);  // C = beta C + alpha A B, in fp32, C rounded once
    attributes.set_post_ops(accumulate);
  }
  const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(ad, bd, cd), attributes, cpu_engine());
  last_implementation() = description.impl_info_str();
  return {dnnl::matmul(description), memory(ad, cpu_engine(), DNNL_MEMORY_NONE),
          memory(bd, cpu_engine(), DNNL_MEMORY_NONE), memory(cd, cpu_engine(), DNNL_MEMORY_NONE)};
}

// Whether the matrices of a batch lie one after another (oneDNN 2.6 gives a
// batch of others to its slower jit gemm; one matrix at a time keeps its brgemm).
template <class T>
bool dense(const MatrixBatch<T>& x) {
  return x.stride == x.rows * x.cols;
}

template <class C>
Product& product(char ta, char tb, float alpha, const MatrixBatch<const bf16>& a, const MatrixBatch<const bf16>& b,
                 float beta, const MatrixBatch<C>& c, index_t count) {
  static std::map<ProductKey, Product> products;
  const ProductKey key{ta,       tb,       count,    c.rows, c.cols, a.rows, a.cols, a.stride, b.cols, b.stride,
                       c.stride, std::is_same<C, float>::value, alpha, beta};
  auto found = products.find(key);
  if (found == products.end())
    found = products.emplace(key, make_product(ta, tb, alpha, a, b, beta, c, count)).first;
  return found->second;
}

}  // namespace

bool onednn_bf16_gemm_built() { return true; }

namespace {

// Whether oneDNN's effective ISA holds `isa`: its ISAs are bit sets, each
// holding those it extends (AMX holds avx512_core_bf16).
bool effective_isa_holds(dnnl::cpu_isa isa) {
  const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto wanted = static_cast<unsigned>(isa);
  return (effective & wanted) == wanted;
}

}  // namespace

bool onednn_bf16_gemm_used() {
  static const bool used = effective_isa_holds(dnnl::cpu_isa::avx512_core_bf16);
  return used;
}

bool onednn_bf16_gemm_on_amx() {
  static const bool amx = effective_isa_holds(dnnl::cpu_isa::avx512_core_amx);
  return amx;
}

std::string host_bf16_gemm_path() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn =
      "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (!onednn_bf16_gemm_used())
    return "the fp32 BLAS on operands widened from bf16 (" + onednn + " uses no bf16 units on this core)";
  const std::string& chosen = last_implementation();
  return onednn + " matmul, bf16 operands, fp32 accumulation, one thread" +
         (chosen.empty() ? std::string() : " (" + chosen + ")");
}

template <class C>
void onednn_bf16_batch(char ta, char tb, float alpha, const MatrixBatch<const bf16>& a,
                       const MatrixBatch<const bf16>& b, float beta, const MatrixBatch<C>& c, index_t count) {
  static_assert(kHostExecution, "oneDNN computes on the host");
  const OneThread one_thread;
  const bool whole_batch = dense(a) && dense(b) && dense(c);
  Product& p = product(ta, tb, alpha, a, b, beta, c, whole_batch ? count : 1);
  for (index_t i = 0; i < (whole_batch ? 1 : count); ++i) {
    // oneDNN takes non-const handles; it reads the operands and writes only C.
    p.a.set_data_handle(const_cast<bf16*>(a.data + i * a.stride));
    p.b.set_data_handle(const_cast<bf16*>(b.data + i * b.stride));
    p.c.set_data_handle(c.data + i * c.stride);
    p.matmul.execute(cpu_stream(), {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  }
  cpu_stream().wait();
}

#else

bool onednn_bf16_gemm_built() { return false; }

bool onednn_bf16_gemm_used() { return false; }

bool onednn_bf16_gemm_on_amx() { return false; }

std::string host_bf16_gemm_path() {
  return "the fp32 BLAS on operands widened from bf16 (a build without oneDNN)";
}

template <class C>
void onednn_bf16_batch(char, char, float, const MatrixBatch<const bf16>&, const MatrixBatch<const bf16>&, float,
                       const MatrixBatch<C>&, index_t) {
  throw std::logic_error("onednn_bf16_batch: this build of miniattn has no oneDNN");
}

#endif

template void onednn_bf16_batch<bf16>(char, char, float, const MatrixBatch<const bf16>&,
                                      const MatrixBatch<const bf16>&, float, const MatrixBatch<bf16>&, index_t);
template void onednn_bf16_batch<float>(char, char, float, const MatrixBatch<const bf16>&,
                                       const MatrixBatch<const bf16>&, float, const MatrixBatch<float>&, index_t);

}  // namespace miniattn::kernels
