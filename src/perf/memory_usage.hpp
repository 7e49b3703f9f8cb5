#pragma once
// Peak resident memory of this process (host), in bytes, from getrusage.
#include <cstddef>

namespace miniattn {

std::size_t peak_resident_bytes();

}  // namespace miniattn
