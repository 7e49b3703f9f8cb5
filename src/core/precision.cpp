#include "core/config.hpp"

namespace miniattn {

const char* to_string(Precision p) { return p == Precision::fp32 ? "fp32" : "fp64"; }

}  // namespace miniattn
