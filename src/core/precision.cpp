// The sizes of a precision's values (config.hpp), from the types the run
// instantiates for it (core/bf16.hpp: Acc<T>, Param<T>).
#include "core/config.hpp"
#include "core/types.hpp"

namespace miniattn {

namespace {

template <class T>
constexpr ElementSizes sizes_of() {
  return {sizeof(T), sizeof(Acc<T>), sizeof(Param<T>)};
}

}  // namespace

ElementSizes element_sizes(Precision precision) {
  switch (precision) {
    case Precision::fp32: return sizes_of<float>();
    case Precision::bf16: return sizes_of<bf16>();
    default: return sizes_of<double>();
  }
}

}  // namespace miniattn
