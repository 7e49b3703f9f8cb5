#pragma once
// What each kernels.attention word is: the precisions it computes, the
// backends it runs on, where auto may take it, and why. The deck check
// (core/config_validation.cpp), the choice of a run's kernel
// (attention_blocking.cpp), the dispatch (dispatch.cpp) and the report
// (driver/) read this table (plain C++: the deck check includes it); nothing else restates it. A new kernel is its
// folder under attention/, its deck word (core/deck_words.hpp) and its record here.
#include <functional>
#include <string>
#include <type_traits>

#include "core/deck_words.hpp"

namespace miniattn {
struct bf16;  // core/bf16.hpp: this header stays free of Kokkos, the deck check reads it
}

namespace miniattn::kernels {

// The kind of a Kokkos execution space a kernel runs on.
enum class Backend { host, cuda, hip };
const char* to_string(Backend backend);

// Sets of Precision or Backend values as bits.
template <class E>
constexpr unsigned bit_of(E value) {
  return 1u << static_cast<unsigned>(value);
}
template <class E, class... More>
constexpr unsigned bits_of(E first, More... more) {
  return (bit_of(first) | ... | bit_of(more));
}

struct AttentionKernelRecord {
  AttentionKernel kernel;
  unsigned precisions;     // bits_of(Precision...) it computes
  unsigned backends;       // bits_of(Backend...) it runs on
  unsigned auto_backends;  // where auto may take it (for the precisions it computes)
  unsigned bf16_backends;  // where it computes bf16, if it does
  const char* what;        // one line for the run's summary
  const char* auto_grounds;  // why auto takes it where it does, and nowhere else

  bool computes(Precision p) const { return (precisions & bit_of(p)) != 0; }
  bool runs_on(Backend b) const { return (backends & bit_of(b)) != 0; }
  bool computes_on(Precision p, Backend b) const {
    return computes(p) && runs_on(b) && (p != Precision::bf16 || (bf16_backends & bit_of(b)) != 0);
  }
  bool auto_takes(Precision p, Backend b) const { return computes_on(p, b) && (auto_backends & bit_of(b)) != 0; }
};

// Every kernel, in auto's order of preference (auto: the first that takes the
// run's precision on its backend).
const AttentionKernelRecord (&attention_kernel_records())[3];

// The record of a named kernel (not of auto).
const AttentionKernelRecord& attention_kernel_record(AttentionKernel kernel);

// The kernel auto picks for a precision on a backend: the first record that
// takes them and that `usable` (when given) accepts; cudnn is usable only
// where libcudnn loads, which only a run can tell.
AttentionKernel auto_attention_kernel(Precision precision, Backend backend,
                                      const std::function<bool(AttentionKernel)>& usable = nullptr);

// Why `kernel` cannot compute `precision` ("" when it can), naming those that can.
std::string attention_kernel_precision_refusal(AttentionKernel kernel, Precision precision);

// Why `kernel`, which computes `precision`, does not on `backend` ("" when it does).
std::string attention_kernel_backend_refusal(AttentionKernel kernel, Precision precision, Backend backend);

// The deck precision whose activations T holds.
template <class T>
constexpr Precision precision_of() {
  if constexpr (std::is_same<T, bf16>::value) return Precision::bf16;
  else if constexpr (std::is_same<T, float>::value) return Precision::fp32;
  else return Precision::fp64;
}

}  // namespace miniattn::kernels
