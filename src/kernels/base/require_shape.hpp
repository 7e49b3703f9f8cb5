#pragma once
// A kernel's check of its arguments' shapes: a caller's bug, so
// std::invalid_argument naming the kernel ("kernels::<where>: <what>").
#include <stdexcept>
#include <string>

namespace miniattn::kernels {

inline void require_shape(bool ok, const char* where, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("kernels::") + where + ": " + what);
}

}  // namespace miniattn::kernels
